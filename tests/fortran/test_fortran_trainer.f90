! Online training from Fortran (tessera_trainer_*, docs/online-training.md) against its
! serial twin: at every dp x tp x domain layout of the world size, a trainer over
! MPI_COMM_WORLD (the type(MPI_Comm) form) trains 4 steps on x(nlon, lat band, C, B)
! fields, each dp replica its own samples; the same trainer on MPI_COMM_SELF at layout
! 1 x 1 x 1 trains on every replica's samples at once over the whole grid. Losses and the
! prediction of each rank's band must agree to a relative 1e-5. At every layout too:
! real64 fields of the same values train and predict bit for bit as the real32 ones;
! data.normalize with mean= and std= on physical real64 fields matches the real32
! trainer fed the normalised fields, predictions in physical units; optimizer.accumulate
! 2 over two micro-batches per step matches the serial twin on one batch twice as large,
! with the step count and tessera_trainer_pending moving as documented. Errors: a field
! of the wrong channel count (TESSERA_ERR_SHAPE on every rank, its extents as declared,
! the band lon first and 1-based), a missing config
! (TESSERA_ERR_IO), data.normalize without mean and std (TESSERA_ERR_CONFIG), a mean of
! the wrong length. The caller's latitudes (latitudes=): all at 60 degrees train bit for
! bit as TESSERA_LATITUDES_UNWEIGHTED for 2 steps; a latitude of 95 and an array of
! another length are refused. tessera_trainer_use_decomp
! on longitude blocks of the whole latitude range (tessera_decomp_create_boxes): the banded
! losses and prediction bit for bit.
program test_fortran_trainer
  use mpi_f08
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64, output_unit
  implicit none

  integer, parameter :: nlon = 8, nlat = 9, nchan = 2, nbatch = 2, nsteps = 4, nmicro = 2
  ! data.normalize's statistics, far from 0 and 1 as a climate code's are.
  real(real64), parameter :: mean(nchan) = [280.0_real64, -3.0_real64], std(nchan) = [15.0_real64, 0.5_real64]
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
  call check_latitudes()
  call check_decomp()
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) write(output_unit, '(a,i0,a,i0,a)') 'test_fortran_trainer: ', total, ' failure(s) at ', nranks, &
    ' rank(s)'
  call MPI_Finalize()
  if (total /= 0) stop 1

contains

  function config(name, dp, tp, domain, accumulate, normalize) result(path)
    character(len=*), intent(in) :: name
    integer, intent(in) :: dp, tp, domain
    integer, intent(in), optional :: accumulate
    logical, intent(in), optional :: normalize
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
        'optimizer:', '  type: adamw', '  lr: 0.01', '  warmup_steps: 1'
      if (present(accumulate)) write(unit, '(a,i0)') '  accumulate: ', accumulate
      write(unit, '(a)') 'schedule:', '  steps: 4', '  seed: 5', 'data:'
      if (present(normalize)) then
        if (normalize) write(unit, '(a)') '  normalize: true'
        if (.not. normalize) write(unit, '(a)') '  normalize: false'
      else
        write(unit, '(a)') '  normalize: false'
      end if
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
  subroutine step_samples(k, replicas, replica, lat1, n, x, y)
    integer, intent(in) :: k, replicas, replica, lat1, n
    real(real32), intent(out) :: x(:, :, :, :), y(:, :, :, :)
    integer :: b, s
    do b = 1, size(x, 4)
      s = (k - 1) * size(x, 4) * replicas + replica * size(x, 4) + b - 1
      call sample(s, lat1, n, x(:, :, :, b))
      call sample(s + 1, lat1, n, y(:, :, :, b))
    end do
  end subroutine

  subroutine run(trainer, replicas, replica, batch, lat1, n, losses, prediction)
    type(tessera_trainer), intent(inout) :: trainer
    integer, intent(in) :: replicas, replica, batch, lat1, n
    real(real64), intent(out) :: losses(nsteps)
    real(real32), intent(out) :: prediction(:, :, :)
    real(real32), allocatable :: x(:, :, :, :), y(:, :, :, :)
    integer :: k, ierr
    allocate(x(nlon, n, nchan, batch), y(nlon, n, nchan, batch))
    do k = 1, nsteps
      call step_samples(k, replicas, replica, lat1, n, x, y)
      call tessera_trainer_step(trainer, x, y, losses(k), ierr=ierr)
      call check(ierr == TESSERA_OK, 'tessera_trainer_step')
    end do
    call sample(100, lat1, n, prediction)
    call tessera_trainer_predict(trainer, prediction, prediction, ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_trainer_predict')
  end subroutine

  ! run() with real64 fields of the same samples: physical (mean + std x per channel) or not.
  subroutine run64(trainer, replicas, replica, batch, lat1, n, physical, losses, prediction)
    type(tessera_trainer), intent(inout) :: trainer
    integer, intent(in) :: replicas, replica, batch, lat1, n
    logical, intent(in) :: physical
    real(real64), intent(out) :: losses(nsteps)
    real(real64), intent(out) :: prediction(:, :, :)
    real(real32), allocatable :: x(:, :, :, :), y(:, :, :, :)
    real(real64), allocatable :: x64(:, :, :, :), y64(:, :, :, :)
    integer :: k, ierr
    allocate(x(nlon, n, nchan, batch), y(nlon, n, nchan, batch))
    allocate(x64(nlon, n, nchan, batch), y64(nlon, n, nchan, batch))
    do k = 1, nsteps
      call step_samples(k, replicas, replica, lat1, n, x, y)
      x64 = physical_of(x, physical)
      y64 = physical_of(y, physical)
      call tessera_trainer_step(trainer, x64, y64, losses(k), ierr=ierr)
      call check(ierr == TESSERA_OK, 'tessera_trainer_step real64')
    end do
    call sample(100, lat1, n, x(:, :, :, 1))
    prediction = reshape(physical_of(x(:, :, :, 1:1), physical), shape(prediction))
    call tessera_trainer_predict(trainer, prediction, prediction, ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_trainer_predict real64')
  end subroutine

  ! x as real64 (exact), or mean + std x per channel (dim 3).
  pure function physical_of(x, physical) result(p)
    real(real32), intent(in) :: x(:, :, :, :)
    logical, intent(in) :: physical
    real(real64) :: p(size(x, 1), size(x, 2), size(x, 3), size(x, 4))
    integer :: c
    p = real(x, real64)
    if (physical) then
      do c = 1, nchan
        p(:, :, c, :) = mean(c) + std(c) * p(:, :, c, :)
      end do
    end if
  end function

  ! real64 fields (plain, and physical under data.normalize) against the real32 run.
  subroutine check_kinds(name, dp, tp, domain, replica, lat1, n, losses, p)
    character(len=*), intent(in) :: name
    integer, intent(in) :: dp, tp, domain, replica, lat1, n
    real(real64), intent(in) :: losses(nsteps)
    real(real32), intent(in) :: p(:, :, :)
    type(tessera_trainer) :: trainer
    real(real64) :: l64(nsteps), q(nlon, n, nchan), expected(nlon, n, nchan, 1)
    integer :: ierr, c
    call tessera_trainer_create(trainer, config(name // '_f64', dp, tp, domain), MPI_COMM_WORLD, nlon, nlat, nchan)
    call run64(trainer, dp, replica, nbatch, lat1, n, .false., l64, q)
    call check(all(l64 == losses), 'real64 fields train as real32 ones, bit for bit')
    call check(all(q == real(p, real64)), 'real64 prediction equals the real32 one')
    call tessera_trainer_destroy(trainer)

    call tessera_trainer_create(trainer, config(name // '_norm', dp, tp, domain, normalize=.true.), MPI_COMM_WORLD, &
                                nlon, nlat, nchan, ierr=ierr, mean=mean, std=std)
    call check(ierr == TESSERA_OK, 'tessera_trainer_create with mean and std')
    call run64(trainer, dp, replica, nbatch, lat1, n, .true., l64, q)
    ! The physical fields round to real32 before normalising: x to about 280 / 15 ulps.
    call check(all(abs(l64 - losses) <= 1e-5_real64 * losses), 'normalised losses against the real32 run')
    expected = physical_of(reshape(p, [nlon, n, nchan, 1]), .true.)
    do c = 1, nchan
      call check(maxval(abs(q(:, :, c) - expected(:, :, c, 1))) <= 1e-5_real64 * std(c), &
                 'normalised prediction in physical units')
    end do
    if (rank == 0) write(output_unit, '(a,a,es9.2,a,es9.2)') name, ' normalised: losses within ', &
      maxval(abs(l64 - losses) / losses), ', prediction within (std) ', &
      maxval(abs(q(:, :, 1) - expected(:, :, 1, 1))) / std(1)
    call tessera_trainer_destroy(trainer)
  end subroutine

  ! optimizer.accumulate 2: step k's two micro-batches of nbatch samples per replica are
  ! the serial twin's one batch of 2 G samples, G = nbatch dp.
  subroutine check_accumulate(name, dp, tp, domain, replica, lat1, n)
    character(len=*), intent(in) :: name
    integer, intent(in) :: dp, tp, domain, replica, lat1, n
    type(tessera_trainer) :: trainer, serial
    real(real32), allocatable :: x(:, :, :, :), y(:, :, :, :), xs(:, :, :, :), ys(:, :, :, :)
    real(real64) :: loss, micro_loss, reference, worst
    integer :: k, m, b, s, g, steps, pending, ierr
    g = nbatch * dp
    allocate(x(nlon, n, nchan, nbatch), y(nlon, n, nchan, nbatch))
    allocate(xs(nlon, nlat, nchan, nmicro * g), ys(nlon, nlat, nchan, nmicro * g))
    call tessera_trainer_create(trainer, config(name // '_acc', dp, tp, domain, accumulate=nmicro), MPI_COMM_WORLD, &
                                nlon, nlat, nchan)
    call tessera_trainer_create(serial, config(name // '_acc_serial', 1, 1, 1), MPI_COMM_SELF, nlon, nlat, nchan)
    worst = 0
    do k = 1, nsteps
      loss = 0
      do m = 1, nmicro
        do b = 1, nbatch
          s = (k - 1) * nmicro * g + (m - 1) * g + replica * nbatch + b - 1
          call sample(s, lat1, n, x(:, :, :, b))
          call sample(s + 1, lat1, n, y(:, :, :, b))
        end do
        call tessera_trainer_pending(trainer, pending)
        call check(pending == m - 1, 'tessera_trainer_pending before a micro-batch')
        call tessera_trainer_step(trainer, x, y, micro_loss, ierr=ierr)
        call check(ierr == TESSERA_OK, 'tessera_trainer_step micro-batch')
        loss = loss + micro_loss / nmicro
        call tessera_trainer_steps(trainer, steps)
        if (m < nmicro) then
          call check(steps == k - 1, 'no optimizer step before the last micro-batch')
        else
          call check(steps == k, 'one optimizer step on the last micro-batch')
        end if
      end do
      do b = 1, nmicro * g
        call sample((k - 1) * nmicro * g + b - 1, 1, nlat, xs(:, :, :, b))
        call sample((k - 1) * nmicro * g + b, 1, nlat, ys(:, :, :, b))
      end do
      call tessera_trainer_step(serial, xs, ys, reference)
      call check(abs(loss - reference) <= 1e-5_real64 * reference, 'accumulated loss against one larger batch')
      worst = max(worst, abs(loss - reference) / reference)
    end do
    if (rank == 0) write(output_unit, '(a,a,es9.2)') name, ' accumulate 2: losses within ', worst
    call tessera_trainer_destroy(serial)
    call tessera_trainer_destroy(trainer)
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
    call check_kinds(trim(name), dp, tp, domain, coords(1), lat1, n, losses, p)
    call check_accumulate(trim(name), dp, tp, domain, coords(1), lat1, n)
  end subroutine

  ! tessera_trainer_use_decomp: the code's own decomposition, longitude blocks (lon first,
  ! 1-based) of the whole latitude range; nsteps steps give the banded losses bit for bit
  ! and the prediction in the code's blocks is the banded one at the same cells.
  subroutine check_decomp()
    type(tessera_trainer) :: banded, blocks
    type(tessera_decomp) :: code
    real(real32), allocatable :: xg(:, :, :, :), yg(:, :, :, :), x(:, :, :, :), y(:, :, :, :), p(:, :, :), &
                                 pg(:, :, :), q(:, :, :)
    real(real64) :: want(nsteps), got(nsteps)
    integer :: lon1, nlon_loc, lat1, n, c, k, ierr
    character(len=:), allocatable :: path
    path = config('decomp', 1, 1, nranks)
    call tessera_trainer_create(banded, path, MPI_COMM_WORLD, nlon, nlat, nchan)
    call tessera_trainer_box(banded, lon1, nlon_loc, lat1, n)
    allocate(p(nlon, n, nchan))
    call run(banded, 1, 0, nbatch, lat1, n, want, p)
    ! The banded prediction on the whole grid, every rank.
    allocate(pg(nlon, nlat, nchan))
    pg = -huge(1.0_real32)
    pg(:, lat1:lat1 + n - 1, :) = p
    call MPI_Allreduce(MPI_IN_PLACE, pg, size(pg), MPI_REAL, MPI_MAX, MPI_COMM_WORLD)
    c = nlon / nranks
    lon1 = rank * c + 1
    call tessera_decomp_create_boxes(code, MPI_COMM_WORLD, [nlon, nlat], [lon1, 1], [c, nlat], ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_decomp_create_boxes')
    call tessera_trainer_create(blocks, path, MPI_COMM_WORLD, nlon, nlat, nchan)
    call tessera_trainer_use_decomp(blocks, code, ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_trainer_use_decomp')
    allocate(xg(nlon, nlat, nchan, nbatch), yg(nlon, nlat, nchan, nbatch))
    allocate(x(c, nlat, nchan, nbatch), y(c, nlat, nchan, nbatch), q(c, nlat, nchan))
    do k = 1, nsteps
      call step_samples(k, 1, 0, 1, nlat, xg, yg)
      x = xg(lon1:lon1 + c - 1, :, :, :)
      y = yg(lon1:lon1 + c - 1, :, :, :)
      call tessera_trainer_step(blocks, x, y, got(k), ierr=ierr)
      call check(ierr == TESSERA_OK, 'tessera_trainer_step on the code''s blocks')
    end do
    call check(all(got == want), 'the code''s blocks train as the bands, bit for bit')
    call sample(100, 1, nlat, pg)
    q = pg(lon1:lon1 + c - 1, :, :)
    call tessera_trainer_predict(blocks, q, q, ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_trainer_predict on the code''s blocks')
    pg = -huge(1.0_real32)
    pg(:, lat1:lat1 + n - 1, :) = p
    call MPI_Allreduce(MPI_IN_PLACE, pg, size(pg), MPI_REAL, MPI_MAX, MPI_COMM_WORLD)
    call check(all(q == pg(lon1:lon1 + c - 1, :, :)), 'the blocks'' prediction is the banded one')
    if (rank == 0) write(output_unit, '(a,i0,a,es10.3)') 'use_decomp: ', nsteps, ' steps, worst loss difference ', &
      maxval(abs(got - want))
    call tessera_trainer_destroy(blocks)
    call tessera_trainer_destroy(banded)
    call tessera_decomp_destroy(code)
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
    ! Agreed: every rank reports rank 0's array, as declared, and its band, lon first.
    if (rank == 0) then
      call check(index(tessera_last_error(), 'tessera_trainer_step: trainer input of extents (' // itoa(nlon) // &
                       ', ' // itoa(n) // ', ' // itoa(nchan + 1) // ') is not (' // itoa(nlon) // ', ' // itoa(n) // &
                       ', ' // itoa(nchan) // ', B): B fields of this rank''s box lon 1:' // itoa(nlon) // &
                       ' x lat 1:' // itoa(n)) > 0, 'the wrong channel count in Fortran order')
    end if
    call tessera_trainer_destroy(trainer)
    call tessera_trainer_create(trainer, trim(dir) // '/no_such.yaml', MPI_COMM_WORLD, nlon, nlat, nchan, ierr=ierr)
    call check(ierr == TESSERA_ERR_IO, 'a missing config is TESSERA_ERR_IO')
    call tessera_trainer_create(trainer, config('normalize', 1, 1, nranks, normalize=.true.), MPI_COMM_WORLD, nlon, &
                                nlat, nchan, ierr=ierr)
    call check(ierr == TESSERA_ERR_CONFIG .and. index(tessera_last_error(), 'data.normalize') > 0, &
               'data.normalize without mean and std is TESSERA_ERR_CONFIG naming the key')
    call tessera_trainer_create(trainer, config('normalize', 1, 1, nranks, normalize=.true.), MPI_COMM_WORLD, nlon, &
                                nlat, nchan, ierr=ierr, mean=mean(1:1), std=std)
    call check(ierr /= TESSERA_OK .and. index(tessera_last_error(), 'mean') > 0, 'a short mean is refused naming it')
    ! A short mean on rank 0 only: the create is collective, so every rank gets the error
    ! (rank 0 used to return before the C call and leave the others waiting in it).
    if (rank == 0) then
      call tessera_trainer_create(trainer, config('normalize', 1, 1, nranks, normalize=.true.), MPI_COMM_WORLD, &
                                  nlon, nlat, nchan, ierr=ierr, mean=mean(1:1), std=std)
    else
      call tessera_trainer_create(trainer, config('normalize', 1, 1, nranks, normalize=.true.), MPI_COMM_WORLD, &
                                  nlon, nlat, nchan, ierr=ierr, mean=mean, std=std)
    end if
    call check(ierr /= TESSERA_OK, 'a short mean on rank 0 only fails the create on every rank')
    if (rank == 0) call check(index(tessera_last_error(), 'mean has 1 values') > 0, 'the short mean is named')
  end subroutine

  ! The caller's own latitudes (latitudes=): rows all at 60 degrees weigh cos(60) over
  ! their own mean, 1 each, so 2 steps train bit for bit as TESSERA_LATITUDES_UNWEIGHTED;
  ! a latitude of 95 is refused on every rank.
  subroutine check_latitudes()
    type(tessera_trainer) :: unweighted, sixty
    integer :: lon1, nlon_loc, lat1, n, k, ierr
    real(real32), allocatable :: x(:, :, :, :), y(:, :, :, :)
    real(real64) :: lu(2), ls(2), lats(nlat)
    lats = 60.0_real64
    call tessera_trainer_create(unweighted, config('lat_unweighted', 1, 1, nranks), MPI_COMM_WORLD, nlon, nlat, &
                                nchan, TESSERA_LATITUDES_UNWEIGHTED, ierr=ierr)
    call check(ierr == TESSERA_OK, 'tessera_trainer_create TESSERA_LATITUDES_UNWEIGHTED')
    call tessera_trainer_create(sixty, config('lat_sixty', 1, 1, nranks), MPI_COMM_WORLD, nlon, nlat, nchan, &
                                ierr=ierr, latitudes=lats)
    call check(ierr == TESSERA_OK, 'tessera_trainer_create with latitudes= all 60: ' // tessera_last_error())
    call tessera_trainer_box(sixty, lon1, nlon_loc, lat1, n)
    allocate(x(nlon, n, nchan, nbatch), y(nlon, n, nchan, nbatch))
    do k = 1, 2
      call step_samples(k, 1, 0, lat1, n, x, y)
      call tessera_trainer_step(unweighted, x, y, lu(k), ierr=ierr)
      call check(ierr == TESSERA_OK, 'step, unweighted')
      call tessera_trainer_step(sixty, x, y, ls(k), ierr=ierr)
      call check(ierr == TESSERA_OK, 'step, latitudes all 60')
    end do
    call check(all(transfer(lu, 0_int64, 2) == transfer(ls, 0_int64, 2)), &
               'latitudes all 60 train bit for bit as TESSERA_LATITUDES_UNWEIGHTED')
    call tessera_trainer_destroy(unweighted)
    call tessera_trainer_destroy(sixty)
    lats(3) = 95.0_real64
    call tessera_trainer_create(sixty, config('lat_sixty', 1, 1, nranks), MPI_COMM_WORLD, nlon, nlat, nchan, &
                                ierr=ierr, latitudes=lats)
    call check(ierr == TESSERA_ERR_INVALID_ARGUMENT, 'a latitude of 95 is refused')
    if (ierr == TESSERA_OK) call tessera_trainer_destroy(sixty)
    call tessera_trainer_create(sixty, config('lat_sixty', 1, 1, nranks), MPI_COMM_WORLD, nlon, nlat, nchan, &
                                ierr=ierr, latitudes=lats(1:nlat - 1))
    call check(ierr == TESSERA_ERR_INVALID_ARGUMENT, 'latitudes of another length than nlat are refused')
    if (ierr == TESSERA_OK) call tessera_trainer_destroy(sixty)
  end subroutine

end program test_fortran_trainer
