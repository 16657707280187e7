! online_training: a climate-style Fortran code that trains tessera's field emulator online
! from its own states, then switches to inference (docs/online-training.md).
!
! The code steps a tracer q(lon, lat) by advection-diffusion on a periodic-in-longitude
! grid (upwind advection, 5-point diffusion, halos filled by tessera_halo_exchange). At
! every step k = 1..ntrain it trains the emulator on the pair (q at k-1, q at k) with
! tessera_trainer_step; then, for ninfer steps, the emulator predicts each next state from
! its own last prediction while the code keeps stepping the truth, and the RMS error is
! printed. The trainer comes from the YAML config given (tessera-run's keys); its
! parallelism section lays the ranks out (dp x tp x domain), and the PDE runs on the
! same latitude bands.
!
! Restart, inside the code's own cycle: `first` stops after step nfirst, saving the
! tracer (a tessera checkpoint of its halo field) and the trainer (tessera_trainer_save);
! `second` restores both and continues. The losses and the final prediction equal those of
! `full` bit for bit.
!
! `full` also writes every state it trained on, q(lon, lat, 1, 0:ntrain), as the array
! 'states' of a tessera checkpoint (WORKDIR/states/step_00000000/checkpoint.h5, dataset
! model/states: [time, channel, lat, lon] f32, the layout tessera-run reads), so that
! tessera-run, given the same config with data.dataset: model/states, data.normalize:
! false, data.shuffle: false, data.batch_size: 1 and schedule.steps: ntrain, trains on the
! same samples in the same order (tests/driver/check_online_training.cmake).
!
! Usage: online_training CONFIG WORKDIR full|first|second [ntrain [ninfer [nfirst]]]
! Writes WORKDIR/losses_<mode>.txt (step, loss) and WORKDIR/prediction_<mode>.bin (the
! last prediction, q(nlon, nlat) real32, gathered on rank 0).
program online_training
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real32, real64, error_unit, output_unit
  implicit none

  integer, parameter :: nlon = 16, nlat = 12
  real(real32), parameter :: kdiff = 0.05_real32

  character(len=512) :: config, workdir, mode, arg
  integer :: ntrain = 12, ninfer = 4, nfirst = 6
  type(tessera_trainer) :: trainer
  type(tessera_mesh) :: mesh
  type(tessera_decomp) :: decomp
  type(tessera_halo) :: halo
  type(tessera_checkpoint) :: ck
  real(real32), allocatable, target :: q(:, :), qn(:, :), g(:, :)
  ! The trainer's fields: (lon, lat, channel), one channel.
  real(real32), allocatable, target :: x(:, :, :), y(:, :, :), p(:, :, :), states(:, :, :, :)
  integer :: sizes(3), coords(3), rank, ierr, step, first, last, lat1, nlat_loc, lon1, nlon_loc, unit, k
  real(real64) :: loss, err, total

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  if (command_argument_count() < 3) then
    if (rank == 0) write(error_unit, '(a)') 'usage: online_training CONFIG WORKDIR full|first|second [ntrain [ninfer [nfirst]]]'
    call MPI_Finalize(ierr)
    stop 2
  end if
  call get_command_argument(1, config)
  call get_command_argument(2, workdir)
  call get_command_argument(3, mode)
  if (command_argument_count() >= 4) then
    call get_command_argument(4, arg)
    read(arg, *) ntrain
  end if
  if (command_argument_count() >= 5) then
    call get_command_argument(5, arg)
    read(arg, *) ninfer
  end if
  if (command_argument_count() >= 6) then
    call get_command_argument(6, arg)
    read(arg, *) nfirst
  end if

  ! The trainer decides the layout; the code's own mesh, decomposition and halo follow it,
  ! so the code's bands are the model's.
  call tessera_trainer_create(trainer, config, MPI_COMM_WORLD, nlon, nlat, 1)
  call tessera_trainer_mesh(trainer, sizes, coords)
  call tessera_trainer_box(trainer, lon1, nlon_loc, lat1, nlat_loc)
  call tessera_mesh_create(mesh, MPI_COMM_WORLD, merge(TESSERA_DATA_DDP, TESSERA_DATA_NONE, sizes(1) > 1), &
                           sizes(2), sizes(3))
  call tessera_decomp_create_from_mesh(decomp, mesh, [nlon, nlat], [1, sizes(3)])   ! lon first
  call tessera_halo_create(halo, decomp, [1, 1], [1, 1], .true., TESSERA_POLE_REPLICATE)
  allocate(q(0:nlon_loc + 1, 0:nlat_loc + 1), qn(nlon_loc, nlat_loc), x(nlon_loc, nlat_loc, 1), &
           y(nlon_loc, nlat_loc, 1), p(nlon_loc, nlat_loc, 1))
  q = 0
  call tessera_halo_add_field(halo, q)

  step = 0
  if (trim(mode) == 'second') then
    call tessera_checkpoint_begin_load(ck, mesh, trim(workdir) // '/restart')
    call tessera_checkpoint_add_field(ck, 'q', halo, q)
    call tessera_checkpoint_commit(ck)
    call tessera_checkpoint_step(ck, step)
    call tessera_checkpoint_destroy(ck)
    call tessera_trainer_restore(trainer, trim(workdir) // '/trainer')
    call tessera_trainer_steps(trainer, k)
    if (k /= step) then
      write(error_unit, '(a,i0,a,i0)') 'online_training: the trainer restored step ', k, ', the tracer step ', step
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  else
    call initial_state()
  end if
  if (trim(mode) == 'full') then
    allocate(states(nlon_loc, nlat_loc, 1, 0:ntrain))
    states(:, :, 1, 0) = q(1:nlon_loc, 1:nlat_loc)
  end if

  ! Online training: one optimizer step per time step, on the step just taken.
  first = step + 1
  last = ntrain
  if (trim(mode) == 'first') last = nfirst
  if (rank == 0) open(newunit=unit, file=trim(workdir) // '/losses_' // trim(mode) // '.txt', status='replace')
  do step = first, last
    x(:, :, 1) = q(1:nlon_loc, 1:nlat_loc)
    call advance()
    y(:, :, 1) = q(1:nlon_loc, 1:nlat_loc)
    call tessera_trainer_step(trainer, x, y, loss)
    if (rank == 0) write(unit, '(i0,1x,es24.16)') step, loss
    if (allocated(states)) states(:, :, :, step) = y
  end do
  if (rank == 0) close(unit)

  if (trim(mode) == 'first') then
    ! The code's restart: its own fields and the trainer, at the same step.
    call tessera_checkpoint_begin_save(ck, mesh, trim(workdir) // '/restart', last, TESSERA_LAYOUT_SHARED)
    call tessera_checkpoint_add_field(ck, 'q', halo, q)
    call tessera_checkpoint_commit(ck)
    call tessera_checkpoint_destroy(ck)
    call tessera_trainer_save(trainer, trim(workdir) // '/trainer')
    if (rank == 0) write(output_unit, '(a,i0)') 'online_training: restart written at step ', last
  else
    if (allocated(states)) then
      call tessera_checkpoint_begin_save(ck, mesh, trim(workdir) // '/states', 0, TESSERA_LAYOUT_SHARED)
      call tessera_checkpoint_add_array(ck, 'states', states, [nlon, nlat, 1, ntrain + 1], [0, lat1 - 1, 0, 0], &
                                        'domain: Shard(2)')
      call tessera_checkpoint_commit(ck)
      call tessera_checkpoint_destroy(ck)
    end if
    ! Inference: the emulator runs on its own predictions; the code keeps the truth.
    p(:, :, 1) = q(1:nlon_loc, 1:nlat_loc)
    do k = 1, ninfer
      call tessera_trainer_predict(trainer, p, p)
      call advance()
      err = sum(real(p(:, :, 1) - q(1:nlon_loc, 1:nlat_loc), real64)**2)
      call MPI_Allreduce(err, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
      ! Every tp and dp rank of a band counted it: divide them out.
      if (rank == 0) write(output_unit, '(a,i0,a,es12.5)') 'online_training: inference step ', k, ': rms error ', &
        sqrt(total / real(sizes(1) * sizes(2), real64) / real(nlon * nlat, real64))
    end do
    ! The gather's root is domain rank 0 of each tp (and dp) group's own domain communicator.
    if (coords(3) == 0) then
      allocate(g(nlon, nlat))
    else
      allocate(g(0, 0))
    end if
    q(1:nlon_loc, 1:nlat_loc) = p(:, :, 1)
    call tessera_halo_gather(halo, q, g, 0)
    if (rank == 0) then
      open(newunit=unit, file=trim(workdir) // '/prediction_' // trim(mode) // '.bin', access='stream', &
           form='unformatted', status='replace')
      write(unit) g
      close(unit)
      write(output_unit, '(a,a,a,i0,a,i0,a,i0,a)') 'online_training: ', trim(mode), ': trained ', ntrain, &
        ' steps, inferred ', ninfer, ' at dp x tp x domain = ', sizes(1) * sizes(2) * sizes(3), ' ranks'
    end if
  end if

  call tessera_trainer_destroy(trainer)
  call tessera_halo_destroy(halo)
  call tessera_decomp_destroy(decomp)
  call tessera_mesh_destroy(mesh)
  call MPI_Finalize(ierr)

contains

  ! A Gaussian blob and a zonal wave: smooth, O(1), on the global grid.
  subroutine initial_state()
    integer :: i, j
    real(real32) :: dl, dp
    do j = 1, nlat_loc
      do i = 1, nlon_loc
        dl = real(lon1 + i - 1 - nlon / 2, real32) / 3.0_real32
        dp = real(lat1 + j - 1 - nlat / 2, real32) / 2.5_real32
        q(i, j) = exp(-0.5_real32 * (dl * dl + dp * dp)) + &
                  0.2_real32 * sin(2.0_real32 * 3.14159265_real32 * real(lon1 + i - 2, real32) / real(nlon, real32))
      end do
    end do
  end subroutine

  ! One time step of the tracer: upwind advection eastwards and northwards, diffusion.
  subroutine advance()
    integer :: i, j
    real(real32), parameter :: cu = 0.4_real32, cv = 0.1_real32
    call tessera_halo_exchange(halo)
    do j = 1, nlat_loc
      do i = 1, nlon_loc
        qn(i, j) = q(i, j) - cu * (q(i, j) - q(i - 1, j)) - cv * (q(i, j) - q(i, j - 1)) + &
                   kdiff * (q(i + 1, j) + q(i - 1, j) + q(i, j + 1) + q(i, j - 1) - 4.0_real32 * q(i, j))
      end do
    end do
    q(1:nlon_loc, 1:nlat_loc) = qn
  end subroutine

end program online_training
