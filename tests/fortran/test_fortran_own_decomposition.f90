! A Fortran code that brings its own decomposition (docs/fortran.md, "Bring your
! decomposition"), as a real one does: MPI_Cart_create with dims (lon, lat) (6 ranks:
! 3 x 2, 4 ranks: 2 x 2, 2 ranks: 2 x 1, 1 rank: 1 x 1), periodic in longitude only; a
! 17 x 13 (lon x lat) real64 field split with the remainder on the last rank of each
! dimension (17 over 2: 8, 9; 13 over 2: 6, 7), first/count from its own arithmetic on
! MPI_Cart_coords; explicit-shape dummies q(0:nx+1, 0:ny+1) with a halo of width 1 and
! its own halo exchange (MPI_Cart_shift, MPI_Sendrecv, lon then lat, zero beyond the
! poles).
!
! For the decomposition made by tessera_decomp_create_cart (order TESSERA_CART_LON_LAT,
! split TESSERA_SPLIT_LAST_RANK) and by tessera_decomp_create_boxes (the code's own
! boxes): tessera_decomp_check_box with the code's box passes, tessera_decomp_box is the
! code's box, tessera_decomp_periodic is [1, 0] (Cartesian) or [-1, -1] (boxes), and a
! halo exchange through tessera (periodic lon, TESSERA_POLE_ZERO) gives every halo cell
! bit-identical to the code's own exchange and to the value the field encodes at that
! global index. Negative checks, each on every rank: check_box with a wrong box on the
! last rank; the Cartesian communicator read in the other order (TESSERA_CART_LAT_LON)
! at 2 and 4 ranks; boxes that overlap; a halo whose periodic_lon contradicts the
! communicator's periods; tessera_decomp_create on the 2 x 2 communicator (it cannot tell
! the order). tessera_decomp_create_split and create_cart's default split (first ranks)
! against the same arithmetic. check_box and create_boxes errors name the boxes as the
! code gave them (lon first, 1-based). tessera_halo_create_edges on the Cartesian
! decomposition: north TESSERA_EDGE_NONE (the code's own rows kept), south
! TESSERA_EDGE_MIRROR_ODD, periodic lon, every cell checked; a pole policy on a
! longitude edge and one periodic longitude edge refused.
program test_fortran_own_decomposition
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real64, int64
  implicit none
  integer, parameter :: nlon = 17, nlat = 13
  integer :: ierr, nranks, status, cart, crank, dims(2), coords(2), first(2), count(2)
  integer :: wrong_first(2), per(2), got_first(2), got_count(2), tfirst(2), tcount(2)
  type(tessera_decomp) :: d
  type(tessera_halo) :: h

  call start_test(nranks)
  dims = [nranks, 1]
  if (nranks == 4) dims = [2, 2]
  if (nranks == 6) dims = [3, 2]  ! non-square: 17 over 3 (5, 5, 7), 13 over 2 (6, 7)
  call MPI_Cart_create(MPI_COMM_WORLD, 2, dims, [.true., .false.], .false., cart, ierr)
  call MPI_Comm_rank(cart, crank, ierr)
  call MPI_Cart_coords(cart, crank, 2, coords, ierr)
  ! The code's own split: n / p each, the last block the remainder too.
  call split_last(nlon, dims(1), coords(1), first(1), count(1))
  call split_last(nlat, dims(2), coords(2), first(2), count(2))

  ! 1. From the Cartesian communicator.
  call tessera_decomp_create_cart(d, cart, [nlon, nlat], TESSERA_CART_LON_LAT, status, split=TESSERA_SPLIT_LAST_RANK)
  call check(status == TESSERA_OK, 'create_cart (lon, lat), last rank')
  call tessera_decomp_check_box(d, first, count, status)
  call check(status == TESSERA_OK, 'check_box with the code''s box (cart)')
  call tessera_decomp_box(d, got_first, got_count)
  call check(all(got_first == first) .and. all(got_count == count), 'decomp_box is the code''s box (cart)')
  call tessera_decomp_periodic(d, per, status)
  call check(status == TESSERA_OK .and. all(per == [1, 0]), 'periodic = [1, 0] from the communicator')
  call compare_exchange(d, 'cart')
  call check_edges(d, 'cart')

  ! A halo that contradicts the communicator's periods is refused.
  call tessera_halo_create(h, d, [1, 1], [1, 1], .false., TESSERA_POLE_ZERO, status)
  call check(status /= TESSERA_OK, 'a non-periodic halo on a lon-periodic communicator is refused')
  if (status == TESSERA_OK) call tessera_halo_destroy(h)

  ! A wrong box on the last rank: a nonzero ierr on every rank, naming that rank.
  wrong_first = first
  if (crank == nranks - 1) wrong_first(1) = first(1) + 1
  call tessera_decomp_check_box(d, wrong_first, count, status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'check_box with a wrong box on the last rank fails here too')
  call check(index(tessera_last_error(), 'rank ' // itoa(nranks - 1)) > 0, &
             'the check_box error names the last rank')
  ! Worded for Fortran: the last rank's boxes lon first and 1-based, inclusive.
  call split_last(nlon, dims(1), dims(1) - 1, tfirst(1), tcount(1))
  call split_last(nlat, dims(2), dims(2) - 1, tfirst(2), tcount(2))
  call check(index(tessera_last_error(), 'rank ' // itoa(nranks - 1) // ' expects to own lon ' // &
                   itoa(tfirst(1) + 1) // ':' // itoa(tfirst(1) + tcount(1)) // ' x lat ' // itoa(tfirst(2)) // ':' // &
                   itoa(tfirst(2) + tcount(2) - 1) // ', but the decomposition') > 0, &
             'the check_box error gives the expected box lon first, 1-based: ' // tessera_last_error())
  call check(index(tessera_last_error(), 'gives it lon ' // itoa(tfirst(1)) // ':' // &
                   itoa(tfirst(1) + tcount(1) - 1) // ' x lat ' // itoa(tfirst(2)) // ':' // &
                   itoa(tfirst(2) + tcount(2) - 1)) > 0, 'the check_box error gives tessera''s box lon first, 1-based')
  call check(index(tessera_last_error(), 'lat [') == 0 .and. index(tessera_last_error(), 'Decomposition::') == 0, &
             'no 0-based (lat, lon) box in the check_box error')
  call tessera_decomp_destroy(d)

  ! The same communicator read in the other order: the boxes differ from the code's at 2,
  ! 4 and 6 ranks, and check_box says so on every rank.
  call tessera_decomp_create_cart(d, cart, [nlon, nlat], TESSERA_CART_LAT_LON, status, TESSERA_SPLIT_LAST_RANK)
  call check(status == TESSERA_OK, 'create_cart read (lat, lon)')
  call tessera_decomp_check_box(d, first, count, status)
  if (nranks == 1) then
    call check(status == TESSERA_OK, 'check_box at 1 rank, either order')
  else
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'check_box catches the wrong dimension order')
  end if
  call tessera_decomp_destroy(d)

  ! tessera's own constructor cannot tell the order of a square communicator: refused.
  if (nranks == 4) then
    call tessera_decomp_create(d, cart, [nlon, nlat], dims, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'decomp_create refuses a 2 x 2 Cartesian communicator')
    if (status == TESSERA_OK) call tessera_decomp_destroy(d)
  end if

  ! The default split is the first ranks': create_cart without `split`.
  call tessera_decomp_create_cart(d, cart, [nlon, nlat], TESSERA_CART_LON_LAT, status)
  call check(status == TESSERA_OK, 'create_cart, default split')
  call split_first(nlon, dims(1), coords(1), tfirst(1), tcount(1))
  call split_first(nlat, dims(2), coords(2), tfirst(2), tcount(2))
  call tessera_decomp_check_box(d, tfirst, tcount, status)
  call check(status == TESSERA_OK, 'create_cart without split: the first ranks hold the remainder')
  call tessera_decomp_destroy(d)

  ! 2. From the code's own boxes.
  call tessera_decomp_create_boxes(d, cart, [nlon, nlat], first, count, status)
  call check(status == TESSERA_OK, 'create_boxes with the code''s boxes')
  call tessera_decomp_check_box(d, first, count, status)
  call check(status == TESSERA_OK, 'check_box with the code''s box (boxes)')
  call tessera_decomp_box(d, got_first, got_count)
  call check(all(got_first == first) .and. all(got_count == count), 'decomp_box is the code''s box (boxes)')
  call tessera_decomp_periodic(d, per, status)
  call check(status == TESSERA_OK .and. all(per == [-1, -1]), 'periodic = [-1, -1] from boxes')
  call compare_exchange(d, 'boxes')
  call tessera_decomp_destroy(d)

  ! Boxes that do not tile the grid (the last rank's box one column wider, or at 1 rank
  ! short of the grid): refused on every rank.
  wrong_first = first
  got_count = count
  if (crank == nranks - 1) then
    if (nranks == 1) then
      got_count(1) = count(1) - 1
    else
      wrong_first(1) = first(1) - 1
      got_count(1) = count(1) + 1
    end if
  end if
  call tessera_decomp_create_boxes(d, cart, [nlon, nlat], wrong_first, got_count, status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'create_boxes with a bad box on the last rank fails here too')
  call check(index(tessera_last_error(), 'lat [') == 0 .and. index(tessera_last_error(), 'lon [') == 0 .and. &
             index(tessera_last_error(), 'itudes [') == 0 .and. index(tessera_last_error(), '(lat, lon') == 0 .and. &
             index(tessera_last_error(), '[' // itoa(nlon) // ', ' // itoa(nlat) // '] (lon, lat)') > 0, &
             'the create_boxes error names the grid and boxes lon first, 1-based: ' // tessera_last_error())
  if (nranks == 1) then
    call check(index(tessera_last_error(), 'longitudes ' // itoa(nlon) // ':' // itoa(nlon) // &
                     ' are owned by no rank') > 0, 'the missing column named 1-based')
  else
    ! The last rank's box, one column wider to the west, as every rank reads it.
    call split_last(nlon, dims(1), dims(1) - 1, tfirst(1), tcount(1))
    call split_last(nlat, dims(2), dims(2) - 1, tfirst(2), tcount(2))
    call check(index(tessera_last_error(), 'rank ' // itoa(nranks - 1) // ' (lon ' // itoa(tfirst(1) - 1) // ':' // &
                     itoa(tfirst(1) + tcount(1) - 1) // ' x lat ' // itoa(tfirst(2)) // ':' // &
                     itoa(tfirst(2) + tcount(2) - 1) // ')') > 0, &
               'the create_boxes error names the last rank''s box lon first, 1-based')
  end if
  if (status == TESSERA_OK) call tessera_decomp_destroy(d)

  ! 3. tessera's rank order (rank r at lon mod(r, plon), lat r / plon), the remainder last.
  call tessera_decomp_create_split(d, MPI_COMM_WORLD, [nlon, nlat], dims, TESSERA_SPLIT_LAST_RANK, status)
  call check(status == TESSERA_OK, 'create_split, last rank')
  call split_last(nlon, dims(1), mod(rank, dims(1)), tfirst(1), tcount(1))
  call split_last(nlat, dims(2), rank / dims(1), tfirst(2), tcount(2))
  call tessera_decomp_check_box(d, tfirst, tcount, status)
  call check(status == TESSERA_OK, 'create_split: check_box with tessera''s rank order, remainder last')
  call tessera_decomp_destroy(d)
  call tessera_decomp_create_split(d, MPI_COMM_WORLD, [nlon, nlat], dims, 7, status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'create_split with an unknown split rule')

  call MPI_Comm_free(cart, ierr)
  call finish_test('test_fortran_own_decomposition', nranks)

contains

  ! The code's split of n cells over p blocks, block c (0-based): 1-based first, count.
  subroutine split_last(n, p, c, first, count)
    integer, intent(in) :: n, p, c
    integer, intent(out) :: first, count
    first = c * (n / p) + 1
    count = n / p
    if (c == p - 1) count = n - c * (n / p)
  end subroutine

  subroutine split_first(n, p, c, first, count)
    integer, intent(in) :: n, p, c
    integer, intent(out) :: first, count
    count = n / p
    if (c < mod(n, p)) count = count + 1
    first = c * (n / p) + min(c, mod(n, p)) + 1
  end subroutine

  ! The field's value at global (i, j): distinct, exact in real64.
  real(real64) function value(i, j)
    integer, intent(in) :: i, j
    value = 1000.0_real64 * j + i + 0.25_real64
  end function

  ! What a halo cell at global (i, j) must hold: periodic in lon, zero beyond the poles.
  real(real64) function expected(i, j)
    integer, intent(in) :: i, j
    expected = 0.0_real64
    if (j >= 1 .and. j <= nlat) expected = value(modulo(i - 1, nlon) + 1, j)
  end function

  subroutine compare_exchange(d, what)
    type(tessera_decomp), intent(in) :: d
    character(len=*), intent(in) :: what
    type(tessera_halo) :: h
    real(real64), allocatable, target :: q_tessera(:, :), q_code(:, :)
    integer :: padded(2), nx, ny, i, j, bad
    nx = count(1); ny = count(2)
    call tessera_halo_create(h, d, [1, 1], [1, 1], .true., TESSERA_POLE_ZERO, status)
    call check(status == TESSERA_OK, 'halo_create (' // what // ')')
    call tessera_halo_padded(h, padded)
    call check(all(padded == [nx + 2, ny + 2]), 'padded extents (' // what // ')')
    allocate(q_tessera(0:nx + 1, 0:ny + 1), q_code(0:nx + 1, 0:ny + 1))
    call fill(q_tessera, nx, ny, first)
    call fill(q_code, nx, ny, first)
    call exchange_by_tessera(h, q_tessera, nx, ny)
    call exchange_by_hand(q_code, nx, ny)
    bad = 0
    do j = 0, ny + 1
      do i = 0, nx + 1
        if (transfer(q_tessera(i, j), 0_int64) /= transfer(q_code(i, j), 0_int64)) bad = bad + 1
        if (transfer(q_tessera(i, j), 0_int64) /= transfer(expected(first(1) - 1 + i, first(2) - 1 + j), 0_int64)) &
          bad = bad + 1
      end do
    end do
    call check(bad == 0, 'every cell bit-identical to the code''s exchange and the global index (' // what // &
               '): ' // itoa(bad) // ' differ')
    call tessera_halo_destroy(h)
  end subroutine

  ! A halo with a policy per edge (tessera_halo_create_edges): width 1 in lon (periodic
  ! west and east), 2 in lat; north TESSERA_EDGE_NONE (a wall the code fills itself: the
  ! two rows beyond j = 1, corners included, keep what the code wrote there), south
  ! TESSERA_EDGE_MIRROR_ODD (halo row k beyond j = nlat holds row nlat + 1 - k negated,
  ! corners the mirrored periodic columns). Every cell of every rank checked, bit for bit.
  subroutine check_edges(d, what)
    type(tessera_decomp), intent(in) :: d
    character(len=*), intent(in) :: what
    type(tessera_halo) :: h
    real(real64), allocatable, target :: q(:, :)
    real(real64) :: want
    integer :: padded(2), nx, ny, i, j, gi, gj, bad
    nx = count(1); ny = count(2)
    call tessera_halo_create_edges(h, d, [1, 2], [1, 2], TESSERA_EDGE_NONE, TESSERA_EDGE_MIRROR_ODD, &
                                   TESSERA_EDGE_PERIODIC, TESSERA_EDGE_PERIODIC, ierr=status)
    call check(status == TESSERA_OK, 'halo_create_edges (' // what // '): ' // tessera_last_error())
    if (status /= TESSERA_OK) return
    call tessera_halo_padded(h, padded)
    call check(all(padded == [nx + 2, ny + 4]), 'padded extents with edges (' // what // ')')
    allocate(q(0:nx + 1, -1:ny + 2))
    do j = -1, ny + 2
      do i = 0, nx + 1
        q(i, j) = sentinel(first(1) - 1 + i, first(2) - 1 + j)
      end do
    end do
    do j = 1, ny
      do i = 1, nx
        q(i, j) = value(first(1) - 1 + i, first(2) - 1 + j)
      end do
    end do
    call tessera_halo_add_field(h, q, status)
    call check(status == TESSERA_OK, 'halo_add_field with edges (' // what // ')')
    call tessera_halo_exchange(h, status)
    call check(status == TESSERA_OK, 'halo_exchange with edges (' // what // ')')
    bad = 0
    do j = -1, ny + 2
      do i = 0, nx + 1
        gi = first(1) - 1 + i
        gj = first(2) - 1 + j
        if (gj < 1) then
          want = sentinel(gi, gj)
        else if (gj > nlat) then
          want = -value(modulo(gi - 1, nlon) + 1, 2 * nlat + 1 - gj)
        else
          want = value(modulo(gi - 1, nlon) + 1, gj)
        end if
        if (transfer(q(i, j), 0_int64) /= transfer(want, 0_int64)) bad = bad + 1
      end do
    end do
    call check(bad == 0, 'every cell with north none and south mirror_odd (' // what // '): ' // itoa(bad) // &
               ' differ')
    call tessera_halo_destroy(h)
    ! Refused on every rank: TESSERA_EDGE_POLE on a longitude edge, one periodic lon edge.
    call tessera_halo_create_edges(h, d, [1, 1], [1, 1], TESSERA_EDGE_NONE, TESSERA_EDGE_NONE, TESSERA_EDGE_POLE, &
                                   TESSERA_EDGE_PERIODIC, TESSERA_POLE_ZERO, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'TESSERA_EDGE_POLE on the west edge is refused')
    if (status == TESSERA_OK) call tessera_halo_destroy(h)
    call tessera_halo_create_edges(h, d, [1, 1], [1, 1], TESSERA_EDGE_NONE, TESSERA_EDGE_NONE, TESSERA_EDGE_PERIODIC, &
                                   TESSERA_EDGE_ZERO, ierr=status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'one periodic longitude edge is refused')
    if (status == TESSERA_OK) call tessera_halo_destroy(h)
  end subroutine

  ! A distinct value the code writes into a halo cell at global (i, j) before an exchange.
  real(real64) function sentinel(i, j)
    integer, intent(in) :: i, j
    sentinel = -1.0e6_real64 - 1000.0_real64 * j - i - 0.5_real64
  end function

  ! The code's interior values, the halo a sentinel.
  subroutine fill(q, nx, ny, first)
    integer, intent(in) :: nx, ny, first(2)
    real(real64), intent(out) :: q(0:nx + 1, 0:ny + 1)
    integer :: i, j
    q = -7.0_real64
    do j = 1, ny
      do i = 1, nx
        q(i, j) = value(first(1) - 1 + i, first(2) - 1 + j)
      end do
    end do
  end subroutine

  ! The halo through tessera, on the code's explicit-shape array.
  subroutine exchange_by_tessera(h, q, nx, ny)
    type(tessera_halo), intent(inout) :: h
    integer, intent(in) :: nx, ny
    real(real64), intent(inout), target :: q(0:nx + 1, 0:ny + 1)
    integer :: status
    call tessera_halo_add_field(h, q, status)
    call check(status == TESSERA_OK, 'halo_add_field on an explicit-shape dummy')
    call tessera_halo_exchange(h, status)
    call check(status == TESSERA_OK, 'halo_exchange')
    call tessera_halo_clear_fields(h)
  end subroutine

  ! The code's own exchange: longitude (periodic), then latitude with the lon halo
  ! columns (the corners), zero beyond the poles.
  subroutine exchange_by_hand(q, nx, ny)
    integer, intent(in) :: nx, ny
    real(real64), intent(inout) :: q(0:nx + 1, 0:ny + 1)
    real(real64) :: sendc(ny), recvc(ny), sendr(nx + 2), recvr(nx + 2)
    integer :: west, east, south, north, ierr
    call MPI_Cart_shift(cart, 0, 1, west, east, ierr)
    call MPI_Cart_shift(cart, 1, 1, south, north, ierr)
    sendc = q(nx, 1:ny)
    call MPI_Sendrecv(sendc, ny, MPI_DOUBLE_PRECISION, east, 1, recvc, ny, MPI_DOUBLE_PRECISION, west, 1, &
                      cart, MPI_STATUS_IGNORE, ierr)
    q(0, 1:ny) = recvc
    sendc = q(1, 1:ny)
    call MPI_Sendrecv(sendc, ny, MPI_DOUBLE_PRECISION, west, 2, recvc, ny, MPI_DOUBLE_PRECISION, east, 2, &
                      cart, MPI_STATUS_IGNORE, ierr)
    q(nx + 1, 1:ny) = recvc
    sendr = q(:, ny)
    recvr = 0.0_real64
    call MPI_Sendrecv(sendr, nx + 2, MPI_DOUBLE_PRECISION, north, 3, recvr, nx + 2, MPI_DOUBLE_PRECISION, south, 3, &
                      cart, MPI_STATUS_IGNORE, ierr)
    q(:, 0) = recvr
    sendr = q(:, 1)
    recvr = 0.0_real64
    call MPI_Sendrecv(sendr, nx + 2, MPI_DOUBLE_PRECISION, south, 4, recvr, nx + 2, MPI_DOUBLE_PRECISION, north, 4, &
                      cart, MPI_STATUS_IGNORE, ierr)
    q(:, ny + 1) = recvr
  end subroutine
end program
