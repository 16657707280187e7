! Normalisation statistics from the code's own fields through the Fortran module
! (tessera_stats_create / _add / _finish / _destroy, issue 41), at 1, 2 and 4 ranks on a
! code's Cartesian decomposition (MPI_Cart_create with dims (lon, lat), the remainder on
! the last rank; 4 ranks: 2 x 2) of a 13 x 11 (lon x lat) grid, 3 channels: air
! temperature near 280, a small signed field near -3 and a constant channel (a mask).
!
! - 3 steps of x(lon, lat, channel, 2 samples), real64: the mean and std per channel
!   equal, bit for bit, the serial twin's (tessera_stats on MPI_COMM_SELF with the whole
!   grid, on every rank) and the same 6 samples added one at a time as x(lon, lat,
!   channel); they agree with a two-pass quadruple-precision reference within 1e-13;
!   count = 6 x 13 x 11;
! - the constant channel gets std = 1e-6 max(|mean|, 1), floored = .true.; with
!   relative_floor = 1e-3 the floor 1e-3 max(|mean|, 1);
! - the same values as real32 fields (exact in real32) give the real64 statistics bit for
!   bit;
! - refused on every rank: a field off the box on the last rank (TESSERA_ERR_SHAPE, that
!   rank's message in Fortran terms: extents lon first, the box 1-based), finish with a
!   `mean` of another length on the last rank (its message names 'mean'), finish before
!   any add, a floor <= 0, a strided section (named 'x').
program test_fortran_stats
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64
  implicit none
  integer, parameter :: nlon = 13, nlat = 11, nc = 3, steps = 3, samples = 2
  integer, parameter :: qp = selected_real_kind(30)
  integer, parameter :: global(2) = [nlon, nlat]
  integer :: ierr, nranks, status, cart, crank, dims(2), coords(2), first(2), count(2), c, k, s
  type(tessera_decomp) :: d, serial
  type(tessera_stats) :: st, twin, one_by_one, single
  real(real64), allocatable, target :: x(:, :, :, :), g(:, :, :, :), x1(:, :, :), bad(:, :, :)
  real(real32), allocatable, target :: x32(:, :, :, :)
  real(real64) :: mean(nc), std(nc), tmean(nc), tstd(nc), omean(nc), ostd(nc), smean(nc), sstd(nc), short(nc - 1)
  real(real64) :: fmean(nc), fstd(nc)
  real(qp) :: rmean, rvar
  logical :: floored(nc)
  integer(int64) :: n

  call start_test(nranks)
  dims = [nranks, 1]
  if (nranks == 4) dims = [2, 2]
  call MPI_Cart_create(MPI_COMM_WORLD, 2, dims, [.true., .false.], .false., cart, ierr)
  call MPI_Comm_rank(cart, crank, ierr)
  call MPI_Cart_coords(cart, crank, 2, coords, ierr)
  do k = 1, 2
    count(k) = global(k) / dims(k)
    first(k) = coords(k) * count(k) + 1
    if (coords(k) == dims(k) - 1) count(k) = global(k) - coords(k) * count(k)
  end do
  call tessera_decomp_create_cart(d, cart, [nlon, nlat], TESSERA_CART_LON_LAT, split=TESSERA_SPLIT_LAST_RANK)
  call tessera_decomp_check_box(d, first, count)
  call tessera_decomp_create_boxes(serial, MPI_COMM_SELF, [nlon, nlat], [1, 1], [nlon, nlat])

  allocate(x(count(1), count(2), nc, samples), g(nlon, nlat, nc, samples), x1(count(1), count(2), nc))
  call tessera_stats_create(st, d, nc)
  call tessera_stats_create(twin, serial, nc)
  call tessera_stats_create(one_by_one, d, nc)
  do k = 1, steps
    call fill(x, first, k)
    call fill(g, [1, 1], k)
    call tessera_stats_add(st, x, status)
    call check(status == TESSERA_OK, 'stats_add (lon, lat, channel, sample) step ' // itoa(k))
    call tessera_stats_add(twin, g)
    do s = 1, samples
      x1 = x(:, :, :, s)
      call tessera_stats_add(one_by_one, x1)
    end do
  end do
  call tessera_stats_finish(st, mean, std, status, floored=floored, count=n)
  call check(status == TESSERA_OK, 'stats_finish: ' // tessera_last_error())
  call tessera_stats_finish(twin, tmean, tstd)
  call tessera_stats_finish(one_by_one, omean, ostd)
  call check(n == int(steps * samples, int64) * nlon * nlat, 'count = steps x samples x nlon x nlat: ' // itoa(int(n)))
  call check(same_bits(mean, tmean) .and. same_bits(std, tstd), 'mean and std equal the serial twin''s bit for bit')
  call check(same_bits(mean, omean) .and. same_bits(std, ostd), 'one sample per add gives the same bits')
  call check(all(floored .eqv. [.false., .false., .true.]), 'only the constant channel is floored')
  call check(mean(3) == 5.0_real64 .and. std(3) == 1.0e-6_real64 * 5.0_real64, &
             'the constant channel: its mean and the floor 1e-6 max(|mean|, 1)')
  ! A two-pass reference in quadruple precision over the global fields.
  do c = 1, 2
    rmean = 0
    rvar = 0
    do k = 1, steps
      call fill(g, [1, 1], k)
      rmean = rmean + sum(real(g(:, :, c, :), qp))
    end do
    rmean = rmean / real(n, qp)
    do k = 1, steps
      call fill(g, [1, 1], k)
      rvar = rvar + sum((real(g(:, :, c, :), qp) - rmean)**2)
    end do
    rvar = rvar / real(n, qp)
    call check(abs(real(mean(c), qp) - rmean) <= 1.0e-13_qp * abs(rmean), &
               'channel ' // itoa(c) // ': mean within 1e-13 of the two-pass reference')
    call check(abs(real(std(c), qp) - sqrt(rvar)) <= 1.0e-13_qp * sqrt(rvar), &
               'channel ' // itoa(c) // ': std within 1e-13 of the two-pass reference')
  end do
  call check(std(1) > 0.1_real64 .and. std(2) > 0.1_real64, 'the varying channels have their own std')

  ! Another floor: the constant channel's std is 1e-3 max(|mean|, 1); finish may be called again.
  call tessera_stats_finish(st, fmean, fstd, status, relative_floor=1.0e-3_real64, floored=floored)
  call check(status == TESSERA_OK .and. fstd(3) == 1.0e-3_real64 * 5.0_real64 .and. floored(3) .and. &
             same_bits(fstd(1:2), std(1:2)), 'relative_floor = 1e-3 raises only the constant channel''s std')

  ! real32 fields of the same (rounded) values: the real64 statistics of those values.
  allocate(x32(count(1), count(2), nc, samples))
  call tessera_stats_create(single, d, nc)
  call tessera_stats_destroy(one_by_one)
  call tessera_stats_create(one_by_one, d, nc)
  do k = 1, steps
    call fill(x, first, k)
    x32 = real(x, real32)
    call tessera_stats_add(single, x32)
    x = real(x32, real64)
    call tessera_stats_add(one_by_one, x)
  end do
  call tessera_stats_finish(single, smean, sstd)
  call tessera_stats_finish(one_by_one, omean, ostd)
  call check(same_bits(smean, omean) .and. same_bits(sstd, ostd), 'real32 fields give the real64 statistics bit for bit')

  ! Refusals, on every rank.
  if (crank == nranks - 1) then
    allocate(bad(count(1) + 1, count(2), nc))
  else
    allocate(bad(count(1), count(2), nc))
  end if
  bad = 1
  call tessera_stats_add(st, bad, status)
  call check(status == TESSERA_ERR_SHAPE, 'a field off the box on the last rank fails every rank: ' // &
             itoa(status))
  if (crank == nranks - 1) then
    call check(index(tessera_last_error(), 'local array of extents (' // itoa(count(1) + 1) // ', ' // &
                     itoa(count(2)) // ', 3) is not (' // itoa(count(1)) // ', ' // itoa(count(2)) // &
                     ', 3[, samples...])') > 0 .and. &
               index(tessera_last_error(), 'lon ' // itoa(first(1)) // ':' // itoa(first(1) + count(1) - 1) // &
                     ' x lat ' // itoa(first(2)) // ':' // itoa(first(2) + count(2) - 1)) > 0, &
               'the shape error in Fortran terms: ' // tessera_last_error())
  else if (nranks > 1) then
    call check(index(tessera_last_error(), 'on rank ' // itoa(nranks - 1)) > 0, &
               'the other ranks'' error names the last rank: ' // tessera_last_error())
  end if
  if (crank == nranks - 1) then
    call tessera_stats_finish(st, short, std, status)
  else
    call tessera_stats_finish(st, mean, std, status)
  end if
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'a short mean on the last rank fails every rank')
  if (crank == nranks - 1) call check(index(tessera_last_error(), "argument 'mean' has 2 elements; the statistics " // &
                                            'have 3 channels') > 0, 'the length error names mean: ' // tessera_last_error())
  call tessera_stats_finish(st, mean, std, status, relative_floor=0.0_real64)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT .and. index(tessera_last_error(), 'floor') > 0, &
             'a floor of 0 is refused')
  call tessera_stats_add(st, x(:, ::2, :, :), status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT .and. &
             index(tessera_last_error(), "tessera_stats_add: argument 'x' is not contiguous") > 0, &
             'a strided section is refused, naming x: ' // tessera_last_error())
  ! The statistics are unchanged by the refused calls.
  call tessera_stats_finish(st, fmean, fstd)
  call check(same_bits(fmean, mean) .and. same_bits(fstd, std), 'refused adds added nothing')
  call tessera_stats_destroy(st)
  call tessera_stats_create(st, d, nc)
  call tessera_stats_finish(st, mean, std, status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT .and. index(tessera_last_error(), 'no field') > 0, &
             'finish before any add is refused')
  call tessera_stats_destroy(twin)
  call tessera_stats_create(twin, d, 0, status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, '0 channels are refused')

  call tessera_stats_destroy(st)
  call tessera_stats_destroy(single)
  call tessera_stats_destroy(one_by_one)
  call tessera_decomp_destroy(serial)
  call tessera_decomp_destroy(d)
  call MPI_Comm_free(cart, ierr)
  call finish_test('test_fortran_stats', nranks)

contains

  ! Step k's fields at global (i, j) from first = the array's global first indices.
  subroutine fill(a, first, k)
    real(real64), intent(out) :: a(:, :, :, :)
    integer, intent(in) :: first(2), k
    integer :: i, j, s
    real(real64) :: gi, gj
    do s = 1, size(a, 4)
      do j = 1, size(a, 2)
        do i = 1, size(a, 1)
          gi = first(1) - 1 + i
          gj = first(2) - 1 + j
          a(i, j, 1, s) = 280.0_real64 + 12.0_real64 * sin(0.3_real64 * gi + 0.17_real64 * gj + k) * &
                                         cos(0.5_real64 * s - 0.2_real64 * gj)
          a(i, j, 2, s) = -3.0_real64 + 0.75_real64 * cos(0.41_real64 * gi - 0.23_real64 * gj * s + k)
          a(i, j, 3, s) = 5.0_real64
        end do
      end do
    end do
  end subroutine

  logical function same_bits(a, b)
    real(real64), intent(in) :: a(:), b(:)
    same_bits = all(transfer(a, 0_int64, size(a)) == transfer(b, 0_int64, size(b)))
  end function
end program
