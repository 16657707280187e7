! A climate code with its own 2 x 2 decomposition runs the field emulator on 1 and on 2
! of its ranks through a redistribution plan (docs/coupling.md), and checks the result
! against the model run serially on the gathered field: bit-identical on one model rank,
! equal to rounding on two (latitude bands). Then the plan itself: a real64 field with
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
  type(tessera_decomp) :: decomp
  type(tessera_redist) :: redist
  real(real32), allocatable :: x_all(:, :, :), y_all(:, :, :), x(:, :, :), y(:, :, :)
  real(real64), allocatable, target :: t(:, :, :), t_model(:, :, :), t_back(:, :, :)
  real(real64), pointer :: p_code(:, :, :), p_model(:, :, :)
  integer :: ierr, nranks, rank, nmodel, model_rank, model_size, i, j, k
  integer :: lat1, nlat, lon1, nlon, mlat1, mnlat, mlon1, mnlon, glat, glon
  integer :: channels, gnlat, gnlon
  real(real64) :: worst, scale

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)

  ! The reference: every rank runs the serial model on the whole field.
  call tessera_mesh_create(self_mesh, MPI_COMM_SELF, TESSERA_DATA_NONE, 1, 1)
  call tessera_model_load(serial, self_mesh, 'runs/emulator')
  call tessera_model_info(serial, channels, gnlat, gnlon)
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
  call tessera_decomp_auto_grid(nranks, gnlat, gnlon, glat, glon)
  call tessera_decomp_create(decomp, MPI_COMM_WORLD, gnlat, gnlon, glat, glon)
  call tessera_decomp_box(decomp, lat1, nlat, lon1, nlon)          ! this rank's block
  if (rank == 0) print '(a,i0,a,i0)', 'code decomposition ', glat, ' x ', glon
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

  ! The plan itself: a field t(lon, lat, level) to a model on 2 ranks and back.
  call tessera_redist_create(redist, decomp, min(2, nranks))
  call tessera_redist_model_box(redist, mlat1, mnlat, mlon1, mnlon)   ! counts 0 off the model
  allocate(t(nlon, nlat, 4), t_back(nlon, nlat, 4), t_model(mnlon, mnlat, 4))
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
    if (any(t_model(1, :, 1) /= [(1000.0_real64 * (mlat1 + j - 1), j = 1, mnlat)])) then
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
