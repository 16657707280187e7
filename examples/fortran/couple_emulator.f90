! A climate code with its own 2 x 2 decomposition runs the field emulator on 1 and on 2
! of its ranks through a redistribution plan (docs/coupling.md), and checks the result
! against the model run serially on the gathered field: bit-identical on one model rank,
! equal to rounding on two (latitude bands). Then online training through the plan: three
! AdamW steps on 1 and 2 model ranks against the same steps of a serial twin (a coupled
! model over MPI_COMM_SELF on the whole field). Then the plan itself: a real64 field with
! levels, moved to the model's layout and back, exactly. Run at 4 ranks from a directory
! holding runs/emulator (a tessera-run checkpoint of the field emulator):
!   mpiexec -n 4 couple_emulator
program couple_emulator
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real32, real64
  implicit none
  type(tessera_mesh) :: self_mesh
  type(tessera_model) :: serial, model
  type(tessera_decomp) :: decomp, whole
  type(tessera_model) :: twin
  type(tessera_redist) :: redist
  real(real32), allocatable :: x_all(:, :, :), y_all(:, :, :), x(:, :, :), y(:, :, :)
  real(real64), allocatable, target :: t(:, :, :), t_model(:, :, :), t_back(:, :, :)
  real(real64), pointer :: p_code(:, :, :), p_model(:, :, :)
  integer :: ierr, nranks, rank, nmodel, model_rank, model_size, i, j, k
  integer :: lat1, nlat, lon1, nlon, first(2), count(2), procs(2), mfirst(2), mcount(2)
  integer :: channels, global(2), gnlat, gnlon
  real(real64) :: worst, scale, loss, twin_loss, low, high
  real(real32), allocatable :: goal_all(:, :, :), goal(:, :, :), out(:, :, :), twin_out(:, :, :)
  integer :: step

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)

  ! The reference: every rank runs the serial model on the whole field.
  call tessera_mesh_create(self_mesh, MPI_COMM_SELF, TESSERA_DATA_NONE, 1, 1)
  call tessera_model_load(serial, self_mesh, 'runs/emulator')
  call tessera_model_info(serial, channels, global)                ! global = [nlon, nlat]
  gnlon = global(1); gnlat = global(2)
  allocate(x_all(gnlon, gnlat, channels), y_all(gnlon, gnlat, channels))
  do i = 1, channels
    do j = 1, gnlat
      do k = 1, gnlon
        x_all(k, j, i) = real(sin(0.1 * j + 0.7 * i) + 0.01 * k, real32)
      end do
    end do
  end do
  call tessera_model_predict(serial, x_all, y_all)

  ! The code's own decomposition: 2 x 2 blocks at 4 ranks (the automatic grid otherwise).
  call tessera_decomp_auto_grid(nranks, global, procs)             ! lon first: [lon, lat]
  call tessera_decomp_create(decomp, MPI_COMM_WORLD, global, procs)
  call tessera_decomp_box(decomp, first, count)                    ! this rank's block
  lon1 = first(1); lat1 = first(2); nlon = count(1); nlat = count(2)
  if (rank == 0) print '(a,i0,a,i0)', 'code decomposition ', procs(1), ' x ', procs(2)
  allocate(x(nlon, nlat, channels), y(nlon, nlat, channels))
  x = x_all(lon1:lon1 + nlon - 1, lat1:lat1 + nlat - 1, :)          ! the code's field

  do nmodel = 1, min(2, nranks)
    ! The model on nmodel of the code's ranks, in latitude bands; every rank calls
    ! predict with its own block, the others wait while the model runs.
    call tessera_model_load_coupled(model, decomp, 'runs/emulator', nmodel)
    call tessera_model_coupling(model, model_size, model_rank)
    call tessera_model_predict(model, x, y)
    worst = maxval(abs(real(y, real64) - y_all(lon1:lon1 + nlon - 1, lat1:lat1 + nlat - 1, :)))
    call MPI_Allreduce(MPI_IN_PLACE, worst, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
    call tessera_model_destroy(model)
    scale = maxval(abs(real(y_all, real64)))
    if (rank == 0) print '(a,i0,a,es9.2,a,es9.2,a)', 'model on ', model_size, &
        ' rank(s): max |difference| from the serial model ', worst, ' (', worst / scale, ' of its largest value)'
    if ((nmodel == 1 .and. worst /= 0) .or. worst > 1e-5 * (1 + scale)) then
      print '(a,i0,a,i0)', 'rank ', rank, ': coupled model differs from the serial one, nmodel ', nmodel
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end do

  ! Online training: inputs and targets in the code's layout on every rank, the step on
  ! the model ranks, the loss back on every rank. The twin trains on the whole field.
  allocate(goal_all(gnlon, gnlat, channels), out(nlon, nlat, channels))
  goal_all = 0.5 * cshift(x_all, 1, dim=2)
  allocate(goal(nlon, nlat, channels), twin_out(gnlon, gnlat, channels))
  goal = goal_all(lon1:lon1 + nlon - 1, lat1:lat1 + nlat - 1, :)
  call tessera_decomp_create(whole, MPI_COMM_SELF, global, [1, 1])
  do nmodel = 1, min(2, nranks)
    call tessera_model_load_coupled(model, decomp, 'runs/emulator', nmodel)
    call tessera_model_load_coupled(twin, whole, 'runs/emulator', 1)
    do step = 1, 3
      call tessera_model_train_step(model, x, goal, 'adamw', 1e-3_real64, loss)
      call tessera_model_train_step(twin, x_all, goal_all, 'adamw', 1e-3_real64, twin_loss)
      low = loss
      high = loss
      call MPI_Allreduce(MPI_IN_PLACE, low, 1, MPI_DOUBLE_PRECISION, MPI_MIN, MPI_COMM_WORLD, ierr)
      call MPI_Allreduce(MPI_IN_PLACE, high, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
      if (low /= high .or. (nmodel == 1 .and. loss /= twin_loss) .or. &
          abs(loss - twin_loss) > 1e-6 * twin_loss) then
        print '(a,i0,a,i0,a,2es14.6)', 'rank ', rank, ': training loss of step ', step, &
            ' differs (coupled, serial): ', loss, twin_loss
        call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
      end if
    end do
    ! The trained weights, seen through the next state they predict.
    call tessera_model_forward(model, x, out)
    call tessera_model_forward(twin, x_all, twin_out)
    worst = maxval(abs(real(out, real64) - twin_out(lon1:lon1 + nlon - 1, lat1:lat1 + nlat - 1, :)))
    call MPI_Allreduce(MPI_IN_PLACE, worst, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
    if (rank == 0) print '(a,i0,a,es12.5,a,es9.2)', 'online training on ', nmodel, &
        ' rank(s): loss after 3 steps ', loss, ', max |difference| from the serial twin ', worst
    if ((nmodel == 1 .and. worst /= 0) .or. worst > 1e-5) then
      print '(a,i0,a)', 'rank ', rank, ': coupled training differs from the serial twin'
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
    call tessera_model_destroy(twin)
    call tessera_model_destroy(model)
  end do
  call tessera_decomp_destroy(whole)

  ! The plan itself: a field t(lon, lat, level) to a model on 2 ranks and back.
  call tessera_redist_create(redist, decomp, min(2, nranks))
  call tessera_redist_model_box(redist, mfirst, mcount)            ! [lon, lat]; counts 0 off the model
  allocate(t(nlon, nlat, 4), t_back(nlon, nlat, 4), t_model(mcount(1), mcount(2), 4))
  do j = 1, nlat
    t(:, j, :) = 1000 * (lat1 + j - 1)
  end do
  t(:, :, 2) = t(:, :, 2) + 1
  p_code => t
  p_model => t_model
  call tessera_redist_add_field(redist, p_code, p_model)
  call tessera_redist_to_model(redist)
  call tessera_redist_model_rank(redist, model_rank)
  if (model_rank >= 0) then
    if (any(t_model(1, :, 1) /= [(1000.0_real64 * (mfirst(2) + j - 1), j = 1, mcount(2))])) then
      print '(a,i0,a)', 'model rank ', model_rank, ': wrong band'
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end if
  call tessera_redist_clear_fields(redist)
  p_code => t_back
  call tessera_redist_add_field(redist, p_code, p_model)
  call tessera_redist_to_code(redist)
  if (any(t_back /= t)) then
    print '(a,i0,a)', 'rank ', rank, ': round trip not exact'
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (rank == 0) print '(a)', 'redistribution round trip exact'

  call tessera_redist_destroy(redist)
  call tessera_decomp_destroy(decomp)
  call tessera_model_destroy(serial)
  call tessera_mesh_destroy(self_mesh)
  call MPI_Finalize(ierr)
end program
