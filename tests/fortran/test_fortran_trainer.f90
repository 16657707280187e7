! Online training from Fortran (tessera_trainer_*, docs/online-training.md) against its
! serial twin: at every dp x tp x domain layout of the world size, a trainer over
! MPI_COMM_WORLD (the type(MPI_Comm) form) trains 4 steps on x(nlon, lat band, C, B)
! fields, each dp replica its own samples; the same trainer on MPI_COMM_SELF at layout
! 1 x 1 x 1 trains on every replica's samples at once over the whole grid. Losses and the
! prediction of each rank's band must agree to a relative 1e-5. Errors: a field of the
! wrong channel count (TESSERA_ERR_SHAPE on every rank), a missing config (TESSERA_ERR_IO).
program test_fortran_trainer
  use mpi_f08
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64, output_unit
  implicit none

  integer, parameter :: nlon = 8, nlat = 9, nchan = 2, nbatch = 2, nsteps = 4
  character(len=512) :: dir
  integer :: nranks, dp, tp, total

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  dir = '.'
  if (command_argument_count() >= 1) call get_command_argument(1, dir)
  do dp = 1, nranks
    do tp = 1, nranks / dp
      if (mod(nranks, dp * tp) /= 0) cycle
      call check_layout(dp, tp, nranks / (dp * tp))
    end do
  end do
  call check_errors()
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) write(output_unit, '(a,i0,a,i0,a)') 'test_fortran_trainer: ', total, ' failure(s) at ', nranks, &
    ' rank(s)'
  call MPI_Finalize()
  if (total /= 0) stop 1

contains

  function config(name, dp, tp, domain) result(path)
    character(len=*), intent(in) :: name
    integer, intent(in) :: dp, tp, domain
    character(len=:), allocatable :: path
    integer :: unit
    path = trim(dir) // '/trainer_f_' // name // '.yaml'
    if (rank == 0) then
      open(newunit=unit, file=path, status='replace')
      write(unit, '(a)') 'parallelism:'
      if (dp > 1) then
        write(unit, '(a)') '  data: ddp'
      else
        write(unit, '(a)') '  data: none'
      end if
      write(unit, '(a,i0)') '  tensor: ', tp
      write(unit, '(a,i0)') '  domain: ', domain
      write(unit, '(a)') 'model:', '  width: 6', '  mlp_hidden: 8', '  blocks: 1', &
        'optimizer:', '  type: adamw', '  lr: 0.01', '  warmup_steps: 1', 'schedule:', '  steps: 4', '  seed: 5', &
        'data:', '  normalize: false'
      close(unit)
    end if
    call MPI_Barrier(MPI_COMM_WORLD)
  end function

  ! Sample s over latitudes lat1 .. lat1 + n - 1 (1-based), all channels: x(nlon, n, nchan).
  subroutine sample(s, lat1, n, x)
    integer, intent(in) :: s, lat1, n
    real(real32), intent(out) :: x(:, :, :)
    integer :: i, j, c
    do c = 1, nchan
      do j = 1, n
        do i = 1, nlon
          x(i, j, c) = real(sin(0.7_real64 * (i - 1 + s) + 0.3_real64 * (c - 1)) * &
                            cos(0.4_real64 * (lat1 + j - 2) - 0.2_real64 * s), real32)
        end do
      end do
    end do
  end subroutine

  ! Step k: replica r's samples are (k - 1) G + r B + b, targets their successors.
  subroutine run(trainer, replicas, replica, batch, lat1, n, losses, prediction)
    type(tessera_trainer), intent(inout) :: trainer
    integer, intent(in) :: replicas, replica, batch, lat1, n
    real(real64), intent(out) :: losses(nsteps)
    real(real32), intent(out) :: prediction(:, :, :)
    real(real32), allocatable :: x(:, :, :, :), y(:, :, :, :)
    integer :: k, b, s, ierr
    allocate(x(nlon, n, nchan, batch), y(nlon, n, nchan, batch))
    do k = 1, nsteps
      do b = 1, batch
        s = (k - 1) * batch * replicas + replica * batch + b - 1
        call sample(s, lat1, n, x(:, :, :, b))
        call sample(s + 1, lat1, n, y(:, :, :, b))
      end do
      call tessera_trainer_step(trainer, x, y, losses(k), ierr=ierr)
      call check(ierr == TESSERA_OK, 'tessera_trainer_step')
    end do
    call sample(100, lat1, n, prediction)
    call tessera_trainer_predict(trainer, prediction, prediction, ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_trainer_predict')
  end subroutine

  subroutine check_layout(dp, tp, domain)
    integer, intent(in) :: dp, tp, domain
    character(len=32) :: name
    type(tessera_trainer) :: trainer, serial
    integer :: sizes(3), coords(3), lon1, nlon_loc, lat1, n, steps, ierr
    real(real64) :: losses(nsteps), reference(nsteps)
    real(real32), allocatable :: p(:, :, :), q(:, :, :)
    write(name, '(a,i0,a,i0,a,i0)') 'dp', dp, '_tp', tp, '_dom', domain
    call tessera_trainer_create(trainer, config(trim(name), dp, tp, domain), MPI_COMM_WORLD, nlon, nlat, nchan, &
                                ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_trainer_create ' // trim(name))
    call tessera_trainer_mesh(trainer, sizes, coords)
    call check(all(sizes == [dp, tp, domain]), 'tessera_trainer_mesh sizes')
    call tessera_trainer_box(trainer, lon1, nlon_loc, lat1, n)
    call check(lon1 == 1 .and. nlon_loc == nlon, 'tessera_trainer_box longitudes')
    allocate(p(nlon, n, nchan), q(nlon, nlat, nchan))
    call run(trainer, dp, coords(1), nbatch, lat1, n, losses, p)
    call tessera_trainer_steps(trainer, steps)
    call check(steps == nsteps, 'tessera_trainer_steps')

    call tessera_trainer_create(serial, config(trim(name) // '_serial', 1, 1, 1), MPI_COMM_SELF, nlon, nlat, nchan)
    call run(serial, 1, 0, nbatch * dp, 1, nlat, reference, q)
    call check(all(abs(losses - reference) <= 1e-5_real64 * abs(reference)), 'losses against the serial twin')
    call check(reference(nsteps) < reference(1), 'the serial twin learns')
    call check(maxval(abs(p - q(:, lat1:lat1 + n - 1, :))) <= 1e-5, 'prediction against the serial twin')
    if (rank == 0) write(output_unit, '(a,a,es14.6,a,es14.6,a,es9.2)') trim(name), ': final loss ', losses(nsteps), &
      ' serial ', reference(nsteps), ', prediction within ', maxval(abs(p - q(:, lat1:lat1 + n - 1, :)))
    call tessera_trainer_destroy(serial)
    call tessera_trainer_destroy(trainer)
  end subroutine

  subroutine check_errors()
    type(tessera_trainer) :: trainer
    integer :: lon1, nlon_loc, lat1, n, ierr
    real(real32), allocatable :: x(:, :, :)
    real(real64) :: loss
    call tessera_trainer_create(trainer, config('errors', 1, 1, nranks), MPI_COMM_WORLD, nlon, nlat, nchan)
    call tessera_trainer_box(trainer, lon1, nlon_loc, lat1, n)
    ! One channel too many on rank 0 only: every rank gets the error.
    if (rank == 0) then
      allocate(x(nlon, n, nchan + 1))
    else
      allocate(x(nlon, n, nchan))
    end if
    x = 0
    call tessera_trainer_step(trainer, x, x, loss, ierr=ierr)
    call check(ierr == TESSERA_ERR_SHAPE, 'a wrong channel count is TESSERA_ERR_SHAPE')
    call tessera_trainer_destroy(trainer)
    call tessera_trainer_create(trainer, trim(dir) // '/no_such.yaml', MPI_COMM_WORLD, nlon, nlat, nchan, ierr=ierr)
    call check(ierr == TESSERA_ERR_IO, 'a missing config is TESSERA_ERR_IO')
  end subroutine

end program test_fortran_trainer
