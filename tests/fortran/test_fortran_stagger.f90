! C-grid staggering from Fortran: a scalar s at the cell centres, u on the east faces and
! v on the latitude faces, q(lon, lat, lev), in one halo, u and v a vector pair. Each is
! scattered from a serial field on rank 0, exchanged, every halo cell compared with a
! serial reference from the faces' positions on the sphere, and gathered back; the
! adjoint is the exchange's transpose (dot-product identity). Every pole policy, real64
! and real32, latitude and longitude bands (and 2 x 2 at 4 ranks), at 1, 2, 3 and 4 ranks.
! The face fields in the orders q(lev, lon, lat) and q(lon, lev, lat) (lon_dim=, lat_dim=)
! against q(lon, lat, lev), and a checkpoint of them written at every decomposition and
! loaded on one rank into the global face arrays (subroutine orders); scatter and gather
! in those orders against the serial global arrays (subroutine scatter_gather_orders).
program test_fortran_stagger
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real32, real64, error_unit
  implicit none
  integer, parameter :: NLAT = 11, NLON = 8, NLEV = 2
  integer, parameter :: LAT_BEFORE = 2, LAT_AFTER = 1, LON_BEFORE = 1, LON_AFTER = 2
  integer :: ierr, rank, nranks, failures, total, layout, pole, kind32
  ! A registered field (real64 or real32) and the test's vectors for the adjoint.
  type :: field_t
    real(real64), pointer :: q8(:, :, :) => null()
    real(real32), pointer :: q4(:, :, :) => null()
    real(real64), allocatable :: x(:, :, :), y(:, :, :)
    integer :: pn, pl, nlon, nlat, lon_first, lon_count, lat_first, lat_count, index
  end type
  type(tessera_decomp) :: decomp

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  failures = 0
  do layout = 1, 3
    if (layout == 1) then
      call tessera_decomp_create(decomp, MPI_COMM_WORLD, NLAT, NLON, nranks, 1)
    else if (layout == 2) then
      call tessera_decomp_create(decomp, MPI_COMM_WORLD, NLAT, NLON, 1, nranks)
    else if (nranks == 4) then
      call tessera_decomp_create(decomp, MPI_COMM_WORLD, NLAT, NLON, 2, 2)
    else
      cycle
    end if
    do pole = TESSERA_POLE_ZERO, TESSERA_POLE_ACROSS_POLE_POINT
      do kind32 = 0, 1
        call run(pole, kind32 == 1, layout)
      end do
      call orders(pole, layout)
    end do
    call tessera_decomp_destroy(decomp)
  end do
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) write(*, '(a)') 'test_fortran_stagger: ' // merge('passed', 'FAILED', total == 0)
  call MPI_Finalize(ierr)
  if (total /= 0) stop 1

contains

  real(real64) function encode(l, i, j)
    integer, intent(in) :: l, i, j  ! 0-based level, latitude and longitude indices
    encode = 1.0_real64 + 10000.0_real64 * l + 100.0_real64 * i + j
  end function

  ! Positions in half-cell units: latitude from the north pole (0) to the south pole, cell
  ! rows at 2i + 1 and their faces at 2f, or pole-point rows at 2i and their faces at
  ! 2f + 1; longitude: centres at 2j + 1, east faces at 2j + 2.
  real(real64) function reference(stagger, points, pole, nfaces, l, i, j, beyond)
    integer, intent(in) :: stagger, pole, nfaces, l, i, j
    logical, intent(in) :: points
    logical, intent(out) :: beyond
    integer :: p, q, s, si, sj
    logical :: odd
    odd = (stagger == TESSERA_STAGGER_LAT_FACE) .eqv. points
    s = merge(2 * (NLAT - 1), 2 * NLAT, points)
    p = 2 * i + merge(1, 0, odd)
    q = 2 * j + merge(2, 1, stagger == TESSERA_STAGGER_LON_FACE)
    si = i
    beyond = p < 0 .or. p > s
    reference = 0
    if (beyond) then
      if (pole == TESSERA_POLE_ZERO) return
      if (pole == TESSERA_POLE_REPLICATE) then
        si = merge(0, nfaces - 1, p < 0)
      else
        p = merge(-p, 2 * s - p, p < 0)
        q = q + NLON
        si = merge((p - 1) / 2, p / 2, odd)
      end if
    end if
    q = modulo(q, 2 * NLON)
    if (stagger == TESSERA_STAGGER_LON_FACE) then
      sj = modulo(q - 2, 2 * NLON) / 2
    else
      sj = (q - 1) / 2
    end if
    reference = encode(l, si, sj)
  end function

  subroutine run(pole, use32, layout)
    integer, intent(in) :: pole, layout
    logical, intent(in) :: use32
    integer, parameter :: staggers(3) = [TESSERA_STAGGER_NONE, TESSERA_STAGGER_LON_FACE, TESSERA_STAGGER_LAT_FACE]
    type(tessera_halo) :: halo
    type(field_t), target :: f(3)
    real(real64), allocatable :: g8(:, :, :), got(:, :, :)
    real(real32), allocatable :: g4(:, :, :)
    real(real64) :: want, sums(2)
    logical :: beyond, points, mirrors
    integer :: k, a, b, l, i, j, errors, wrong, status
    integer :: seed

    points = pole == TESSERA_POLE_ACROSS_POLE_POINT
    mirrors = pole == TESSERA_POLE_ACROSS_POLE .or. points
    call tessera_halo_create(halo, decomp, LAT_BEFORE, LAT_AFTER, LON_BEFORE, LON_AFTER, .true., pole)
    do k = 1, 3
      associate (c => f(k))
        call tessera_halo_padded_staggered(halo, staggers(k), c%pn, c%pl)
        call tessera_halo_box_staggered(halo, staggers(k), c%nlon, c%nlat, c%lon_first, c%lon_count, &
                                        c%lat_first, c%lat_count)
        if (c%nlat /= merge(NLAT, merge(NLAT - 1, NLAT + 1, points), k < 3) .or. c%nlon /= NLON) then
          call fail('global extents', k, layout, pole)
        end if
        allocate(g8(c%nlon, c%nlat, NLEV), g4(c%nlon, c%nlat, NLEV))
        do l = 0, NLEV - 1
          do i = 0, c%nlat - 1
            do j = 0, c%nlon - 1
              g8(j + 1, i + 1, l + 1) = encode(l, i, j)
            end do
          end do
        end do
        g4 = real(g8, real32)
        if (use32) then
          allocate(c%q4(c%pn, c%pl, NLEV))
          c%q4 = -7
          call tessera_halo_add_field_staggered(halo, c%q4, staggers(k), index=c%index)
          call tessera_halo_scatter_staggered(halo, g4, c%q4, staggers(k), 0)
        else
          allocate(c%q8(c%pn, c%pl, NLEV))
          c%q8 = -7
          call tessera_halo_add_field_staggered(halo, c%q8, staggers(k), index=c%index)
          call tessera_halo_scatter_staggered(halo, g8, c%q8, staggers(k), 0)
        end if
        deallocate(g8, g4)
      end associate
    end do
    if (f(2)%index /= 2 .or. f(3)%index /= 3) call fail('field indices', 0, layout, pole)
    call tessera_halo_set_vector_pair(halo, f(2)%index, f(3)%index)
    call tessera_halo_set_vector_pair(halo, f(2)%index, 9, status)
    if (status /= TESSERA_ERR_INVALID_ARGUMENT) call fail('vector pair index 9 accepted', 0, layout, pole)
    call tessera_halo_exchange(halo)

    do k = 1, 3
      associate (c => f(k))
        allocate(got(c%pn, c%pl, NLEV))
        if (use32) then
          got = real(c%q4, real64)
        else
          got = c%q8
        end if
        errors = 0
        do l = 1, NLEV
          do b = 1, c%pl
            do a = 1, c%pn
              i = c%lat_first - 1 - LAT_BEFORE + (b - 1)
              j = c%lon_first - 1 - LON_BEFORE + (a - 1)
              want = reference(staggers(k), points, pole, c%nlat, l - 1, i, j, beyond)
              if (beyond .and. mirrors .and. k > 1) want = -want
              if (got(a, b, l) /= want) then
                if (errors < 3) write(error_unit, '(a, 3i4, 2(a, i0), 2(a, g0))') 'stagger mismatch (lev, lat, lon) ', &
                  l - 1, i, j, ' field ', k, ' rank ', rank, ': ', got(a, b, l), ' /= ', want
                errors = errors + 1
              end if
            end do
          end do
        end do
        if (errors > 0) call fail('halo cells', k, layout, pole)
        deallocate(got)
        ! Gathered back, the serial field.
        allocate(g8(c%nlon, c%nlat, NLEV), g4(c%nlon, c%nlat, NLEV))
        g8 = 0; g4 = 0
        if (use32) then
          call tessera_halo_gather_staggered(halo, c%q4, g4, staggers(k), 0)
          g8 = real(g4, real64)
        else
          call tessera_halo_gather_staggered(halo, c%q8, g8, staggers(k), 0)
        end if
        if (rank == 0) then
          wrong = 0
          do l = 0, NLEV - 1
            do i = 0, c%nlat - 1
              do j = 0, c%nlon - 1
                if (g8(j + 1, i + 1, l + 1) /= encode(l, i, j)) wrong = wrong + 1
              end do
            end do
          end do
          if (wrong > 0) call fail('gather', k, layout, pole)
        end if
        deallocate(g8, g4)
      end associate
    end do

    ! <A x, y> = <x, A^T y> over the three fields (values exact in real32).
    seed = 31 + rank
    sums = 0
    do k = 1, 3
      associate (c => f(k))
        allocate(c%x(c%pn, c%pl, NLEV), c%y(c%pn, c%pl, NLEV))
        do l = 1, NLEV
          do b = 1, c%pl
            do a = 1, c%pn
              seed = modulo(seed * 1103 + 12345, 65536)
              c%x(a, b, l) = seed / 65536.0_real64 - 0.5_real64
              seed = modulo(seed * 1103 + 12345, 65536)
              c%y(a, b, l) = seed / 65536.0_real64 - 0.5_real64
            end do
          end do
        end do
        call put(c, c%x)
      end associate
    end do
    call tessera_halo_exchange(halo)
    do k = 1, 3
      sums(1) = sums(1) + sum(value_of(f(k)) * f(k)%y)
      call put(f(k), f(k)%y)
    end do
    call tessera_halo_exchange_adjoint(halo)
    do k = 1, 3
      sums(2) = sums(2) + sum(f(k)%x * value_of(f(k)))
    end do
    call MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (abs(sums(1) - sums(2)) > merge(1e-5_real64, 1e-12_real64, use32) * max(1.0_real64, abs(sums(1)))) then
      call fail('dot-product identity', 0, layout, pole)
    end if

    call tessera_halo_destroy(halo)
    do k = 1, 3
      if (associated(f(k)%q8)) deallocate(f(k)%q8)
      if (associated(f(k)%q4)) deallocate(f(k)%q4)
    end do
  end subroutine

  ! u (real64) and v (real32) registered as q(lon, lat, lev), q(lev, lon, lat) and
  ! q(lon, lev, lat): after an exchange the other orders hold the first's values on every
  ! cell. Then a checkpoint of u from q(lev, lon, lat) and v from q(lon, lev, lat), loaded
  ! on rank 0 alone (one 1 x 1 box, other halo widths) into u(lon, lat, lev) and
  ! v(lev, lon, lat): the global face arrays.
  subroutine orders(pole, layout)
    integer, intent(in) :: pole, layout
    type(tessera_halo) :: halo, halo1
    type(tessera_decomp) :: decomp1
    type(tessera_mesh) :: mesh
    type(tessera_checkpoint) :: ckpt
    real(real64), allocatable, target :: u(:, :, :), u_kij(:, :, :), u_ikj(:, :, :), g8(:, :, :)
    real(real32), allocatable, target :: v(:, :, :), v_kij(:, :, :), v_ikj(:, :, :), g4(:, :, :), cells(:, :, :)
    integer :: upn, upl, vpn, vpl, cpn, cpl, nlon, unlat, vnlat, i1, n1, j1, m1, l, a, b, wrong, status
    character(len=200) :: root, text

    call tessera_halo_create(halo, decomp, LAT_BEFORE, LAT_AFTER, LON_BEFORE, LON_AFTER, .true., pole)
    call tessera_halo_padded_staggered(halo, TESSERA_STAGGER_NONE, cpn, cpl)
    call tessera_halo_padded_staggered(halo, TESSERA_STAGGER_LON_FACE, upn, upl)
    call tessera_halo_padded_staggered(halo, TESSERA_STAGGER_LAT_FACE, vpn, vpl)
    call tessera_halo_box_staggered(halo, TESSERA_STAGGER_LON_FACE, nlon, unlat, j1, m1, i1, n1)
    call tessera_halo_box_staggered(halo, TESSERA_STAGGER_LAT_FACE, nlon, vnlat, j1, m1, i1, n1)
    allocate(u(upn, upl, NLEV), v(vpn, vpl, NLEV))
    u = -7; v = -7
    call global_fields(nlon, unlat, vnlat, g8, g4)
    call tessera_halo_scatter_staggered(halo, g8, u, TESSERA_STAGGER_LON_FACE, 0)
    call tessera_halo_scatter_staggered(halo, g4, v, TESSERA_STAGGER_LAT_FACE, 0)
    call scatter_gather_orders(halo, g8, g4, u, v, layout, pole)
    u_kij = reshape(u, [NLEV, upn, upl], order=[2, 3, 1])
    u_ikj = reshape(u, [upn, NLEV, upl], order=[1, 3, 2])
    v_kij = reshape(v, [NLEV, vpn, vpl], order=[2, 3, 1])
    v_ikj = reshape(v, [vpn, NLEV, vpl], order=[1, 3, 2])
    call tessera_halo_add_field_staggered(halo, u, TESSERA_STAGGER_LON_FACE)
    call tessera_halo_add_field_staggered(halo, u_kij, TESSERA_STAGGER_LON_FACE, lon_dim=2, lat_dim=3)
    call tessera_halo_add_field_staggered(halo, u_ikj, TESSERA_STAGGER_LON_FACE, lon_dim=1, lat_dim=3)
    call tessera_halo_add_field_staggered(halo, v, TESSERA_STAGGER_LAT_FACE)
    call tessera_halo_add_field_staggered(halo, v_kij, TESSERA_STAGGER_LAT_FACE, lon_dim=2, lat_dim=3)
    call tessera_halo_add_field_staggered(halo, v_ikj, TESSERA_STAGGER_LAT_FACE, lon_dim=1, lat_dim=3)
    ! Errors name the argument, in the caller's terms: a stagger that is none; latitude
    ! faces with the cells' extents (they differ on the southernmost band).
    call tessera_halo_add_field_staggered(halo, u_kij, 7, ierr=status, lon_dim=2, lat_dim=3)
    call expect_error(status, TESSERA_ERR_INVALID_ARGUMENT, 'stagger 7', layout, pole)
    if (cpl /= vpl) then
      allocate(cells(NLEV, cpn, cpl))
      call tessera_halo_add_field_staggered(halo, cells, TESSERA_STAGGER_LAT_FACE, ierr=status, lon_dim=2, lat_dim=3)
      write(text, '(4(a, i0), a)') "tessera_halo_add_field_staggered: 'field': dims 2 (lon) and 3 (lat) have " // &
        'extents ', cpn, ' and ', cpl, '; this rank''s box plus the halo is ', vpn, ' x ', vpl, &
        ' (lon x lat, tessera_halo_padded_staggered)'
      call expect_error(status, TESSERA_ERR_SHAPE, trim(text), layout, pole)
    end if
    call tessera_halo_exchange(halo)
    wrong = 0
    do l = 1, NLEV
      do b = 1, upl
        do a = 1, upn
          if (u_kij(l, a, b) /= u(a, b, l) .or. u_ikj(a, l, b) /= u(a, b, l)) wrong = wrong + 1
        end do
      end do
      do b = 1, vpl
        do a = 1, vpn
          if (v_kij(l, a, b) /= v(a, b, l) .or. v_ikj(a, l, b) /= v(a, b, l)) wrong = wrong + 1
        end do
      end do
    end do
    if (wrong > 0) call fail('other dimension orders differ from q(lon, lat, lev)', wrong, layout, pole)

    write(root, '(a, i0)') 'stagger_checkpoint_np', nranks
    call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)
    call tessera_checkpoint_begin_save(ckpt, mesh, trim(root), 4 * layout + pole, TESSERA_LAYOUT_SHARED)
    call tessera_checkpoint_add_field_staggered(ckpt, 'u', halo, u_kij, TESSERA_STAGGER_LON_FACE, lon_dim=2, lat_dim=3)
    call tessera_checkpoint_add_field_staggered(ckpt, 'v', halo, v_ikj, TESSERA_STAGGER_LAT_FACE, lon_dim=1, lat_dim=3)
    call tessera_checkpoint_add_field_staggered(ckpt, 'w', halo, u, 7, status)
    call expect_error(status, TESSERA_ERR_INVALID_ARGUMENT, 'stagger 7', layout, pole)
    if (cpl /= vpl) then
      call tessera_checkpoint_add_field_staggered(ckpt, 'v2', halo, cells, TESSERA_STAGGER_LAT_FACE, status, &
                                                  lon_dim=2, lat_dim=3)
      call expect_error(status, TESSERA_ERR_SHAPE, "tessera_checkpoint_add_field_staggered: field 'v2': dims 2 " // &
                        '(lon) and 3 (lat)', layout, pole)
    end if
    call tessera_checkpoint_commit(ckpt)
    call tessera_checkpoint_destroy(ckpt)
    call tessera_mesh_destroy(mesh)
    call tessera_halo_destroy(halo)
    deallocate(u, v, v_kij)

    if (rank == 0) then
      call tessera_mesh_create(mesh, MPI_COMM_SELF, TESSERA_DATA_NONE, 1, 1)
      call tessera_decomp_create(decomp1, MPI_COMM_SELF, NLAT, NLON, 1, 1)
      call tessera_halo_create(halo1, decomp1, 1, 2, 2, 1, .true., pole)
      call tessera_halo_padded_staggered(halo1, TESSERA_STAGGER_LON_FACE, upn, upl)
      call tessera_halo_padded_staggered(halo1, TESSERA_STAGGER_LAT_FACE, vpn, vpl)
      allocate(u(upn, upl, NLEV), v_kij(NLEV, vpn, vpl))
      call tessera_checkpoint_begin_load(ckpt, mesh, trim(root))
      call tessera_checkpoint_add_field_staggered(ckpt, 'u', halo1, u, TESSERA_STAGGER_LON_FACE)
      call tessera_checkpoint_add_field_staggered(ckpt, 'v', halo1, v_kij, TESSERA_STAGGER_LAT_FACE, lon_dim=2, &
                                                  lat_dim=3)
      call tessera_checkpoint_commit(ckpt)
      call tessera_checkpoint_destroy(ckpt)
      ! Interiors from (lon 3, lat 2): halo widths lon 2 before, lat 1 before.
      wrong = count(u(3:2 + NLON, 2:1 + unlat, :) /= g8)
      do l = 1, NLEV
        wrong = wrong + count(v_kij(l, 3:2 + NLON, 2:1 + vnlat) /= g4(:, :, l))
      end do
      if (wrong > 0) call fail('checkpoint loaded at one rank', wrong, layout, pole)
      call tessera_halo_destroy(halo1)
      call tessera_decomp_destroy(decomp1)
      call tessera_mesh_destroy(mesh)
    end if
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
  end subroutine

  ! Scatter and gather in other dimension orders (lon_dim=, lat_dim=): u as
  ! q(lev, lon, lat) and v as q(lon, lev, lat) from global arrays in the same orders get
  ! the padded arrays of q(lon, lat, lev)'s scatter (u, v: halo cells -7), and gathered
  ! back they are the serial global arrays on rank 0. A global array of the wrong extents
  ! on the root fails every rank, naming them lon first.
  subroutine scatter_gather_orders(halo, g8, g4, u, v, layout, pole)
    type(tessera_halo), intent(in) :: halo
    real(real64), intent(in) :: g8(:, :, :), u(:, :, :)
    real(real32), intent(in) :: g4(:, :, :), v(:, :, :)
    integer, intent(in) :: layout, pole
    real(real64), allocatable :: u_kij(:, :, :), g8_kij(:, :, :), back8(:, :, :), bad(:, :, :)
    real(real32), allocatable :: v_ikj(:, :, :), g4_ikj(:, :, :), back4(:, :, :)
    integer :: nlon, unlat, vnlat, status, wrong
    character(len=200) :: text
    nlon = size(g8, 1); unlat = size(g8, 2); vnlat = size(g4, 2)
    g8_kij = reshape(g8, [NLEV, nlon, unlat], order=[2, 3, 1])
    g4_ikj = reshape(g4, [nlon, NLEV, vnlat], order=[1, 3, 2])
    allocate(u_kij(NLEV, size(u, 1), size(u, 2)), source=-7.0_real64)
    allocate(v_ikj(size(v, 1), NLEV, size(v, 2)), source=-7.0_real32)
    call tessera_halo_scatter_staggered(halo, g8_kij, u_kij, TESSERA_STAGGER_LON_FACE, 0, status, lon_dim=2, &
                                        lat_dim=3)
    wrong = merge(0, 1, status == TESSERA_OK)
    call tessera_halo_scatter_staggered(halo, g4_ikj, v_ikj, TESSERA_STAGGER_LAT_FACE, 0, status, lon_dim=1, &
                                        lat_dim=3)
    wrong = wrong + merge(0, 1, status == TESSERA_OK)
    wrong = wrong + count(u_kij /= reshape(u, shape(u_kij), order=[2, 3, 1])) + &
            count(v_ikj /= reshape(v, shape(v_ikj), order=[1, 3, 2]))
    if (wrong > 0) call fail('scatter into q(lev, lon, lat) and q(lon, lev, lat)', wrong, layout, pole)

    allocate(back8, mold=g8_kij)
    allocate(back4, mold=g4_ikj)
    back8 = 0; back4 = 0
    call tessera_halo_gather_staggered(halo, u_kij, back8, TESSERA_STAGGER_LON_FACE, 0, status, lon_dim=2, lat_dim=3)
    wrong = merge(0, 1, status == TESSERA_OK)
    call tessera_halo_gather_staggered(halo, v_ikj, back4, TESSERA_STAGGER_LAT_FACE, 0, status, lon_dim=1, lat_dim=3)
    wrong = wrong + merge(0, 1, status == TESSERA_OK)
    if (rank == 0) wrong = wrong + count(back8 /= g8_kij) + count(back4 /= g4_ikj)
    if (wrong > 0) call fail('gather from q(lev, lon, lat) and q(lon, lev, lat)', wrong, layout, pole)

    allocate(bad(NLEV, nlon, unlat + 1))
    bad = 0
    call tessera_halo_gather_staggered(halo, u_kij, bad, TESSERA_STAGGER_LON_FACE, 0, status, lon_dim=2, lat_dim=3)
    write(text, '(4(a, i0))') "tessera_halo_gather_staggered: gather: the global array's lon x lat extents ", nlon, &
      ' x ', unlat + 1, ' are not the field''s global extents ', nlon, ' x ', unlat
    call expect_error(status, TESSERA_ERR_SHAPE, trim(text), layout, pole)
  end subroutine

  ! The serial u (nlon x unlat faces, real64) and v (nlon x vnlat, real32).
  subroutine global_fields(nlon, unlat, vnlat, g8, g4)
    integer, intent(in) :: nlon, unlat, vnlat
    real(real64), allocatable, intent(out) :: g8(:, :, :)
    real(real32), allocatable, intent(out) :: g4(:, :, :)
    integer :: l, i, j
    allocate(g8(nlon, unlat, NLEV), g4(nlon, vnlat, NLEV))
    do l = 0, NLEV - 1
      do j = 0, nlon - 1
        do i = 0, unlat - 1
          g8(j + 1, i + 1, l + 1) = encode(l, i, j)
        end do
        do i = 0, vnlat - 1
          g4(j + 1, i + 1, l + 1) = real(encode(l, i, j), real32)
        end do
      end do
    end do
  end subroutine

  subroutine expect_error(status, code, text, layout, pole)
    integer, intent(in) :: status, code, layout, pole
    character(len=*), intent(in) :: text
    if (status /= code .or. index(tessera_last_error(), text) == 0) then
      write(error_unit, '(a, i0, a, i0, a)') 'expected status ', code, ' and "' // text // '"; got ', status, &
        ': "' // tessera_last_error() // '"'
      call fail('error message', 0, layout, pole)
    end if
  end subroutine

  subroutine put(c, values)
    type(field_t), intent(inout) :: c
    real(real64), intent(in) :: values(:, :, :)
    if (associated(c%q4)) then
      c%q4 = real(values, real32)
    else
      c%q8 = values
    end if
  end subroutine

  function value_of(c) result(v)
    type(field_t), intent(in) :: c
    real(real64), allocatable :: v(:, :, :)
    if (associated(c%q4)) then
      v = real(c%q4, real64)
    else
      v = c%q8
    end if
  end function

  subroutine fail(what, k, layout, pole)
    character(len=*), intent(in) :: what
    integer, intent(in) :: k, layout, pole
    write(error_unit, '(4(a, i0))') 'FAILED ' // what // ': field ', k, ' layout ', layout, ' pole ', pole, &
      ' rank ', rank
    failures = failures + 1
  end subroutine
end program
