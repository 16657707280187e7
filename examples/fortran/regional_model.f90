! regional_model: a regional model written as an MPI Fortran climate code is written,
! which hands four jobs to tessera and changes nothing of its own (docs/fortran.md starts
! from it).
!
! The model: temperature T (K) and humidity q (g/kg) on a 48 x 43 lat-lon grid of the
! Arctic, 65-86.5 N (rows every 0.5 degrees, their latitudes given explicitly), periodic in
! longitude, with solid walls at both latitude edges; advected upwind by an eastward jet
! and a meridional wind, and diffused. real64, halo width 1. Its decomposition is its own:
! MPI_Cart_create with dims (lon, lat), the remainder of an uneven split on the last rank
! of each dimension, arrays state(0:nx+1, 0:ny+1, 2) passed as explicit-shape dummies,
! and the halo rows beyond the walls written by the model itself (zero gradient).
!
! tessera does, on that decomposition:
!  1. the halo exchange (tessera_decomp_create_cart, tessera_halo_create_edges:
!     periodic in longitude, TESSERA_EDGE_NONE at the walls), checked once against the
!     model's own MPI_Sendrecv exchange, cell for cell;
!  2. the normalisation statistics of the spin-up (tessera_stats_*);
!  3. online training of the field emulator on the model's blocks, its loss weighted by
!     the grid's own latitudes (tessera_trainer_create with latitudes=,
!     tessera_trainer_use_decomp), and inference (tessera_trainer_predict);
!  4. the restart: the model's fields as a tessera checkpoint and the trainer, both
!     readable at any rank count.
!
! Usage: regional_model full OUT         spin up, train, write the restart OUT/restart
!                                         and OUT/trainer, then go on
!        regional_model restart OUT FROM  read FROM/restart and FROM/trainer, then go on
! "Go on" is the same in both: train 4 more steps, then infer one. Rank 0 writes
! OUT/state.bin (the last state) and OUT/prediction.bin (the emulator's step to it),
! each T then q as real64 (lon, lat).
program regional_model
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real64, int64, output_unit
  implicit none
  integer, parameter :: nlon = 48, nlat = 43, nf = 2              ! fields: T, q
  integer, parameter :: nspin = 10, ntrain = 8, nmore = 4         ! steps of each phase
  real(real64), parameter :: pi = 3.14159265358979323846_real64
  character(len=*), parameter :: names(nf) = ['T', 'q']

  integer :: cart, rank, nranks, dims(2), coords(2), first(2), nx, ny, ierr, f, unit, j, k
  integer :: step = 0                                             ! the model's time step
  real(real64) :: lat(nlat)
  real(real64), allocatable, target :: state(:, :, :), x(:, :, :), y(:, :, :), g(:, :, :)
  real(real64), target :: mean(nf), std(nf)
  real(real64) :: loss, total(nf)
  character(len=256) :: mode, out, from
  type(tessera_decomp) :: decomp
  type(tessera_halo) :: halo
  type(tessera_mesh) :: mesh
  type(tessera_stats) :: stats
  type(tessera_trainer) :: trainer
  type(tessera_checkpoint) :: ck

  call MPI_Init(ierr)
  call get_command_argument(1, mode)
  call get_command_argument(2, out)
  call get_command_argument(3, from)

  ! --- The model's own grid and decomposition -------------------------------------------
  lat = [(65.25_real64 + 0.5_real64 * (j - 1), j = 1, nlat)]        ! row j's latitude
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  dims = 0
  call MPI_Dims_create(nranks, 2, dims, ierr)                        ! (lon, lat)
  call MPI_Cart_create(MPI_COMM_WORLD, 2, dims, [.true., .false.], .false., cart, ierr)
  call MPI_Comm_rank(cart, rank, ierr)
  call MPI_Cart_coords(cart, rank, 2, coords, ierr)
  call split(nlon, dims(1), coords(1), first(1), nx)
  call split(nlat, dims(2), coords(2), first(2), ny)
  allocate(state(0:nx + 1, 0:ny + 1, nf), x(nx, ny, nf), y(nx, ny, nf))
  state = 0

  ! --- 1. tessera takes that decomposition as it is -------------------------------------
  call tessera_decomp_create_cart(decomp, cart, [nlon, nlat], TESSERA_CART_LON_LAT, &
                                  split=TESSERA_SPLIT_LAST_RANK)
  call tessera_decomp_check_box(decomp, first, [nx, ny])             ! aborts if we disagree
  call tessera_halo_create_edges(halo, decomp, [1, 1], [1, 1], north=TESSERA_EDGE_NONE, &
                                 south=TESSERA_EDGE_NONE, west=TESSERA_EDGE_PERIODIC, east=TESSERA_EDGE_PERIODIC)
  call tessera_halo_add_field(halo, state)                           ! all fields, one message
  call tessera_mesh_create(mesh, cart, TESSERA_DATA_NONE, 1, nranks) ! for checkpoints
  if (rank == 0) write(output_unit, '(a,i0,a,i0,a,i0,a)') 'regional_model: ', nranks, ' ranks as ', dims(1), &
    ' x ', dims(2), ' (lon x lat), 48 x 43 cells, 65.25-86.25 N'

  if (trim(mode) == 'full') then
    call initial_state(state, nx, ny)
    call check_halo()
    ! --- 2. Normalisation statistics of the spin-up ---------------------------------------
    call tessera_stats_create(stats, decomp, nf)
    do k = 1, nspin
      call step_model(state, nx, ny)
      x = state(1:nx, 1:ny, :)
      call tessera_stats_add(stats, x)
    end do
    call tessera_stats_finish(stats, mean, std)
    call tessera_stats_destroy(stats)
    if (rank == 0) write(output_unit, '(a,i0,a,2(a,a,es23.15e3,a,es23.15e3))') 'statistics of ', nspin, &
      ' steps:', (' ', names(f) // ' mean ', mean(f), ' std ', std(f), f = 1, nf)
    ! --- 3. Online training on the model's own blocks -------------------------------------
    call start_trainer()
    do k = 1, ntrain
      call train_step()
    end do
    ! --- 4. The restart: the model's fields and statistics, and the trainer ---------------
    call tessera_checkpoint_begin_save(ck, mesh, trim(out) // '/restart', step, TESSERA_LAYOUT_SHARED)
    call tessera_checkpoint_add_field(ck, 'state', halo, state)      ! the interior, any rank count
    call tessera_checkpoint_add_array(ck, 'mean', mean, [nf], [0], '')
    call tessera_checkpoint_add_array(ck, 'std', std, [nf], [0], '')
    call tessera_checkpoint_commit(ck)
    call tessera_checkpoint_destroy(ck)
    call tessera_trainer_save(trainer, trim(out) // '/trainer')
    call report_sums('restart written at step ', step)
  else
    call tessera_checkpoint_begin_load(ck, mesh, trim(from) // '/restart')
    call tessera_checkpoint_add_field(ck, 'state', halo, state)
    call tessera_checkpoint_add_array(ck, 'mean', mean, [nf], [0], '')
    call tessera_checkpoint_add_array(ck, 'std', std, [nf], [0], '')
    call tessera_checkpoint_commit(ck)
    call tessera_checkpoint_step(ck, step)
    call tessera_checkpoint_destroy(ck)
    call report_sums('restart read at step ', step)
    call start_trainer()
    call tessera_trainer_restore(trainer, trim(from) // '/trainer')
  end if

  ! Go on: more training, then the emulator's step beside the model's.
  do k = 1, nmore
    call train_step()
  end do
  x = state(1:nx, 1:ny, :)
  call tessera_trainer_predict(trainer, x, y)                        ! the emulator's next state
  call step_model(state, nx, ny)                                     ! the model's
  do f = 1, nf
    x(:, :, f) = ((y(:, :, f) - state(1:nx, 1:ny, f)) / std(f))**2
    call tessera_decomp_global_sum(decomp, x(:, :, f), total(f))
  end do
  if (rank == 0) write(output_unit, '(a,i0,a,2(a,a,es10.3))') 'inference of step ', step, &
    ': rms error in std units', (' ', names(f) // ' ', sqrt(total(f) / (nlon * nlat)), f = 1, nf)
  call write_global(state(1:nx, 1:ny, :), trim(out) // '/state.bin')
  call write_global(y, trim(out) // '/prediction.bin')

  call tessera_trainer_destroy(trainer)
  call tessera_halo_destroy(halo)
  call tessera_decomp_destroy(decomp)
  call tessera_mesh_destroy(mesh)
  call MPI_Comm_free(cart, ierr)
  call MPI_Finalize(ierr)

contains

  ! The model's split of n cells over p blocks: block c (0-based) gets n / p, the last
  ! one the remainder too. first is 1-based.
  subroutine split(n, p, c, first, count)
    integer, intent(in) :: n, p, c
    integer, intent(out) :: first, count
    first = c * (n / p) + 1
    count = n / p
    if (c == p - 1) count = n - c * (n / p)
  end subroutine

  subroutine initial_state(s, nx, ny)
    integer, intent(in) :: nx, ny
    real(real64), intent(out) :: s(0:nx + 1, 0:ny + 1, nf)
    integer :: i, j
    real(real64) :: lam, phi
    s = 0
    do j = 1, ny
      do i = 1, nx
        lam = 2 * pi * (first(1) + i - 2) / nlon
        phi = (lat(first(2) + j - 1) - 65) / 21.5_real64            ! 0 .. 1 across the domain
        s(i, j, 1) = 270 - 20 * phi + 4 * cos(2 * lam) * sin(pi * phi)
        s(i, j, 2) = 3 - 2 * phi + exp(-10 * ((lam - pi) / pi)**2 - 20 * (phi - 0.4_real64)**2)
      end do
    end do
  end subroutine

  ! One time step: halo exchange, the walls, upwind advection and diffusion. Winds in
  ! cells per step: an eastward jet cu(lat), a meridional cv(lon, lat) that vanishes at
  ! the walls.
  subroutine step_model(s, nx, ny)
    integer, intent(in) :: nx, ny
    real(real64), intent(inout), target :: s(0:nx + 1, 0:ny + 1, nf)   ! tessera writes its halo
    real(real64) :: sn(nx, ny, nf), cu, cv, phi
    real(real64), parameter :: kd = 0.05_real64
    integer :: i, j
    call tessera_halo_exchange(halo)
    call walls(s, nx, ny)
    do j = 1, ny
      phi = (lat(first(2) + j - 1) - 65) / 21.5_real64
      cu = 0.3_real64 + 0.2_real64 * sin(pi * phi)
      do i = 1, nx
        cv = 0.2_real64 * sin(2 * pi * (first(1) + i - 2) / nlon) * sin(pi * phi)
        sn(i, j, :) = s(i, j, :) - cu * (s(i, j, :) - s(i - 1, j, :)) &
                      - max(cv, 0.0_real64) * (s(i, j, :) - s(i, j - 1, :)) &
                      - min(cv, 0.0_real64) * (s(i, j + 1, :) - s(i, j, :)) &
                      + kd * (s(i + 1, j, :) + s(i - 1, j, :) + s(i, j + 1, :) + s(i, j - 1, :) - 4 * s(i, j, :))
      end do
    end do
    s(1:nx, 1:ny, :) = sn
    step = step + 1
  end subroutine

  ! The rows beyond the walls (corners included) are the model's: zero gradient.
  subroutine walls(s, nx, ny)
    integer, intent(in) :: nx, ny
    real(real64), intent(inout) :: s(0:nx + 1, 0:ny + 1, nf)
    if (coords(2) == 0) s(:, 0, :) = s(:, 1, :)
    if (coords(2) == dims(2) - 1) s(:, ny + 1, :) = s(:, ny, :)
  end subroutine

  ! The model's own exchange, from before tessera: longitude (periodic), then latitude
  ! with the longitude halo columns (the corners); nothing beyond the walls.
  subroutine own_exchange(s, nx, ny)
    integer, intent(in) :: nx, ny
    real(real64), intent(inout) :: s(0:nx + 1, 0:ny + 1, nf)
    real(real64) :: cs(ny, nf), cr(ny, nf), rs(0:nx + 1, nf), rr(0:nx + 1, nf)
    integer :: west, east, south, north
    call MPI_Cart_shift(cart, 0, 1, west, east, ierr)
    call MPI_Cart_shift(cart, 1, 1, south, north, ierr)
    cs = s(nx, 1:ny, :)
    call MPI_Sendrecv(cs, ny * nf, MPI_DOUBLE_PRECISION, east, 1, cr, ny * nf, MPI_DOUBLE_PRECISION, west, 1, &
                      cart, MPI_STATUS_IGNORE, ierr)
    s(0, 1:ny, :) = cr
    cs = s(1, 1:ny, :)
    call MPI_Sendrecv(cs, ny * nf, MPI_DOUBLE_PRECISION, west, 2, cr, ny * nf, MPI_DOUBLE_PRECISION, east, 2, &
                      cart, MPI_STATUS_IGNORE, ierr)
    s(nx + 1, 1:ny, :) = cr
    rs = s(:, ny, :)
    call MPI_Sendrecv(rs, (nx + 2) * nf, MPI_DOUBLE_PRECISION, north, 3, rr, (nx + 2) * nf, MPI_DOUBLE_PRECISION, &
                      south, 3, cart, MPI_STATUS_IGNORE, ierr)
    if (south /= MPI_PROC_NULL) s(:, 0, :) = rr
    rs = s(:, 1, :)
    call MPI_Sendrecv(rs, (nx + 2) * nf, MPI_DOUBLE_PRECISION, south, 4, rr, (nx + 2) * nf, MPI_DOUBLE_PRECISION, &
                      north, 4, cart, MPI_STATUS_IGNORE, ierr)
    if (north /= MPI_PROC_NULL) s(:, ny + 1, :) = rr
  end subroutine

  ! tessera's exchange against the model's own, every cell of every rank, bit for bit
  ! (the rows beyond the walls hold the model's values before and after both).
  subroutine check_halo()
    real(real64), allocatable :: copy(:, :, :)
    integer :: differ(2), total(2)
    call walls(state, nx, ny)
    copy = state
    call tessera_halo_exchange(halo)
    call own_exchange(copy, nx, ny)
    differ = [count(transfer(state, 0_int64, size(state)) /= transfer(copy, 0_int64, size(copy))), size(state)]
    call MPI_Reduce(differ, total, 2, MPI_INTEGER, MPI_SUM, 0, cart, ierr)
    if (rank == 0) write(output_unit, '(a,i0,a,i0,a)') 'halo exchange: ', total(1), ' of ', total(2), &
      ' cells differ from the model''s own exchange'
  end subroutine

  ! The emulator of the config written here (tessera-run's YAML keys), on the model's grid
  ! with its own latitudes, normalised by the spin-up's statistics, fed the model's blocks.
  subroutine start_trainer()
    character(len=:), allocatable :: config
    config = trim(out) // '/emulator.yaml'
    if (rank == 0) then
      open(newunit=unit, file=config, status='replace')
      write(unit, '(a)') 'parallelism:', '  data: none', '  tensor: 1'
      write(unit, '(a,i0)') '  domain: ', nranks
      write(unit, '(a)') 'model:', '  width: 16', '  mlp_hidden: 32', '  blocks: 2', &
        'optimizer:', '  type: adamw', '  lr: 0.003', 'schedule:', '  steps: 100', '  seed: 11'
      close(unit)
    end if
    call MPI_Barrier(cart, ierr)
    call tessera_trainer_create(trainer, config, cart, nlon, nlat, nf, mean=mean, std=std, latitudes=lat)
    call tessera_trainer_use_decomp(trainer, decomp)
  end subroutine

  ! One model step, and one training step on the pair (before, after).
  subroutine train_step()
    x = state(1:nx, 1:ny, :)
    call step_model(state, nx, ny)
    y = state(1:nx, 1:ny, :)
    call tessera_trainer_step(trainer, x, y, loss)
    if (rank == 0) write(output_unit, '(a,i0,a,es23.15e3)') 'train step ', step, ': loss ', loss
  end subroutine

  ! Exact global sums of the fields (the same bits at any rank count).
  subroutine report_sums(what, at)
    character(len=*), intent(in) :: what
    integer, intent(in) :: at
    x = state(1:nx, 1:ny, :)
    do f = 1, nf
      call tessera_decomp_global_sum(decomp, x(:, :, f), total(f))
    end do
    if (rank == 0) write(output_unit, '(a,i0,a,2(a,a,a,es23.15e3))') what, at, ':', &
      (' sum ', names(f), ' = ', total(f), f = 1, nf)
  end subroutine

  ! Rank 0 writes the global field, gathered from every rank's block.
  subroutine write_global(local, path)
    real(real64), intent(in) :: local(nx, ny, nf)
    character(len=*), intent(in) :: path
    real(real64), allocatable, target :: mine(:, :, :)
    mine = local
    if (rank == 0) then
      allocate(g(nlon, nlat, nf))
    else
      allocate(g(1, 1, 1))
    end if
    call tessera_decomp_gather(decomp, mine, g, 0)
    if (rank == 0) then
      open(newunit=unit, file=path, access='stream', form='unformatted', status='replace')
      write(unit) g
      close(unit)
    end if
    deallocate(g)
  end subroutine
end program regional_model
