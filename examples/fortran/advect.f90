! advect: a small climate-style model in Fortran on the tessera module.
!
! Two tracers, q (real64) and c (real32), are advected by a prescribed wind and diffused
! on a regular lat-lon grid, periodic in longitude, with zero-gradient poles. Arrays are
! the code's own, q(0:nlon_loc+1, 0:nlat_loc+1) with a one-cell halo frame; the grid is
! split along latitude over the ranks (uneven splits are fine); every step one tessera
! halo exchange fills the frames of both fields; restarts are tessera checkpoints. Every
! cell's update depends only on its global indices and its neighbours, so any number of
! ranks gives the same bits.
!
! usage: mpiexec -n N advect_f [nlat=45] [nlon=72] [steps=100] [restart_every=0]
!                [restart_dir=DIR] [restart_from=PATH] [layout=shared|per_rank] [out=FILE]
!
! out=FILE: rank 0 writes q (nlat*nlon real64, longitude fastest) then c (real32): the
! same bytes as examples/c/advect.c writes.
program advect
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real32, real64, error_unit, output_unit
  implicit none

  real(real64), parameter :: pi = 3.14159265358979323846_real64
  real(real64), parameter :: kq = 0.05_real64
  real(real32), parameter :: kc = 0.05_real32

  integer :: nlat = 45, nlon = 72, steps = 100, restart_every = 0, layout = TESSERA_LAYOUT_SHARED
  character(len=512) :: restart_dir = 'restart_f', restart_from = '', out = ''

  type(tessera_mesh) :: mesh
  type(tessera_decomp) :: decomp
  type(tessera_halo) :: halo
  type(tessera_checkpoint) :: ck
  real(real64), allocatable, target :: q(:, :), qn(:, :), gq(:, :)
  real(real32), allocatable, target :: c(:, :), cn(:, :), gc(:, :)
  integer :: model_comm, nranks, rank, ierr, step, i, j, lat1, nlat_loc, lon1, nlon_loc, unit, first(2), count(2)
  real(real64) :: phi, lam, cu, cv, dqx, dqy, dl, dp, mq, mc
  real(real32) :: fu, fv, dcx, dcy

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  if (.not. parse_arguments()) then
    if (rank == 0) write(error_unit, '(a)') 'advect_f: bad arguments (see the usage in advect.f90)'
    call MPI_Finalize(ierr)
    stop 2
  end if

  ! The code's own communicator: tessera never assumes MPI_COMM_WORLD.
  call MPI_Comm_dup(MPI_COMM_WORLD, model_comm, ierr)
  call MPI_Comm_size(model_comm, nranks, ierr)

  ! No ierr: any failure prints tessera's message and aborts the job.
  call tessera_mesh_create(mesh, model_comm, TESSERA_DATA_NONE, 1, nranks)
  ! Lon first: [lon, lat] pairs. procs [0, 0]: latitude bands.
  call tessera_decomp_create_from_mesh(decomp, mesh, [nlon, nlat], [0, 0])
  call tessera_halo_create(halo, decomp, [1, 1], [1, 1], .true., TESSERA_POLE_REPLICATE)
  call tessera_decomp_box(decomp, first, count)          ! 1-based first indices, counts
  lon1 = first(1); lat1 = first(2); nlon_loc = count(1); nlat_loc = count(2)

  allocate(q(0:nlon_loc + 1, 0:nlat_loc + 1), qn(nlon_loc, nlat_loc))
  allocate(c(0:nlon_loc + 1, 0:nlat_loc + 1), cn(nlon_loc, nlat_loc))
  q = 0; c = 0
  call tessera_halo_add_field(halo, q)
  call tessera_halo_add_field(halo, c)

  step = 0
  if (len_trim(restart_from) > 0) then
    call tessera_checkpoint_begin_load(ck, mesh, restart_from)
    call tessera_checkpoint_add_field(ck, 'q', halo, q)
    call tessera_checkpoint_add_field(ck, 'c', halo, c)
    call tessera_checkpoint_commit(ck)
    call tessera_checkpoint_step(ck, step)
    call tessera_checkpoint_destroy(ck)
  else
    do j = 1, nlat_loc
      do i = 1, nlon_loc
        phi = lat_deg(lat1 + j - 2)
        lam = lon_deg(lon1 + i - 2)
        dl = (lam - 180.0_real64) / 30.0_real64
        dp = (phi - 20.0_real64) / 15.0_real64
        q(i, j) = exp(-0.5_real64 * (dl * dl + dp * dp))
        c(i, j) = real(1.0_real64 + 0.5_real64 * cos(lam * pi / 180.0_real64) * cos(phi * pi / 180.0_real64), &
                       real32)
      end do
    end do
  end if

  do while (step < steps)
    call tessera_halo_exchange(halo)
    do j = 1, nlat_loc
      phi = lat_deg(lat1 + j - 2) * pi / 180.0_real64
      do i = 1, nlon_loc
        lam = lon_deg(lon1 + i - 2) * pi / 180.0_real64
        cu = 0.4_real64 * cos(phi)
        cv = 0.2_real64 * sin(lam) * cos(phi)
        if (cu > 0) then
          dqx = q(i, j) - q(i - 1, j)
        else
          dqx = q(i + 1, j) - q(i, j)
        end if
        if (cv > 0) then
          dqy = q(i, j) - q(i, j - 1)
        else
          dqy = q(i, j + 1) - q(i, j)
        end if
        qn(i, j) = q(i, j) - cu * dqx - cv * dqy + &
                   kq * (q(i + 1, j) + q(i - 1, j) + q(i, j + 1) + q(i, j - 1) - 4.0_real64 * q(i, j))
        fu = real(cu, real32)
        fv = real(cv, real32)
        if (fu > 0) then
          dcx = c(i, j) - c(i - 1, j)
        else
          dcx = c(i + 1, j) - c(i, j)
        end if
        if (fv > 0) then
          dcy = c(i, j) - c(i, j - 1)
        else
          dcy = c(i, j + 1) - c(i, j)
        end if
        cn(i, j) = c(i, j) - fu * dcx - fv * dcy + &
                   kc * (c(i + 1, j) + c(i - 1, j) + c(i, j + 1) + c(i, j - 1) - 4.0_real32 * c(i, j))
      end do
    end do
    q(1:nlon_loc, 1:nlat_loc) = qn
    c(1:nlon_loc, 1:nlat_loc) = cn
    step = step + 1
    if (restart_every > 0) then
      if (mod(step, restart_every) == 0) then
        call tessera_checkpoint_begin_save(ck, mesh, restart_dir, step, layout)
        call tessera_checkpoint_set_metadata(ck, 'advect_f: q (f64) and c (f32) on a lat-lon grid')
        call tessera_checkpoint_add_field(ck, 'q', halo, q)
        call tessera_checkpoint_add_field(ck, 'c', halo, c)
        call tessera_checkpoint_commit(ck)
        call tessera_checkpoint_destroy(ck)
      end if
    end if
  end do

  ! Diagnostics on the gathered fields (the same summation order at every rank count).
  if (rank == 0) then
    allocate(gq(nlon, nlat), gc(nlon, nlat))
  else
    allocate(gq(0, 0), gc(0, 0))
  end if
  call tessera_halo_gather(halo, q, gq, 0)
  call tessera_halo_gather(halo, c, gc, 0)
  if (rank == 0) then
    mq = 0
    mc = 0
    do j = 1, nlat
      do i = 1, nlon
        mq = mq + gq(i, j)
        mc = mc + real(gc(i, j), real64)
      end do
    end do
    write(output_unit, '(a,i0,a,i0,a,i0,a,i0,a,es25.17,a,es16.9)') 'advect_f: ', nranks, ' ranks, ', nlat, 'x', &
      nlon, ' grid, step ', step, ': sum q = ', mq, ', sum c = ', mc
    if (len_trim(out) > 0) then
      open(newunit=unit, file=trim(out), access='stream', form='unformatted', status='replace', action='write')
      write(unit) gq
      write(unit) gc
      close(unit)
    end if
  end if

  call tessera_halo_destroy(halo)
  call tessera_decomp_destroy(decomp)
  call tessera_mesh_destroy(mesh)
  call MPI_Comm_free(model_comm, ierr)
  call MPI_Finalize(ierr)

contains

  ! Cell centres from 0-based global indices: row 0 is the northernmost.
  real(real64) function lat_deg(j0)
    integer, intent(in) :: j0
    lat_deg = 90.0_real64 - 180.0_real64 * (real(j0, real64) + 0.5_real64) / real(nlat, real64)
  end function

  real(real64) function lon_deg(i0)
    integer, intent(in) :: i0
    lon_deg = 360.0_real64 * (real(i0, real64) + 0.5_real64) / real(nlon, real64)
  end function

  logical function parse_arguments() result(ok)
    character(len=1024) :: arg
    integer :: k, eq, stat
    character(len=:), allocatable :: key, val
    ok = .true.
    do k = 1, command_argument_count()
      call get_command_argument(k, arg)
      eq = index(arg, '=')
      if (eq < 2) then
        ok = .false.
        return
      end if
      key = arg(:eq - 1)
      val = trim(arg(eq + 1:))
      stat = 0
      select case (key)
      case ('nlat'); read(val, *, iostat=stat) nlat
      case ('nlon'); read(val, *, iostat=stat) nlon
      case ('steps'); read(val, *, iostat=stat) steps
      case ('restart_every'); read(val, *, iostat=stat) restart_every
      case ('restart_dir'); restart_dir = val
      case ('restart_from'); restart_from = val
      case ('out'); out = val
      case ('layout')
        if (val == 'shared') then
          layout = TESSERA_LAYOUT_SHARED
        else if (val == 'per_rank') then
          layout = TESSERA_LAYOUT_PER_RANK
        else
          stat = 1
        end if
      case default
        stat = 1
      end select
      if (stat /= 0) then
        ok = .false.
        return
      end if
    end do
    ok = nlat > 0 .and. nlon > 0 .and. steps >= 0 .and. restart_every >= 0
  end function

end program advect
