! tessera_decomp_global_sum and tessera_decomp_auto_grid from Fortran (mpi module):
! q(lon, lat, lev) decomposed on the automatic grid sums to the same bits as the serial
! sum of the whole field on a one-rank decomposition, in real64 and real32.
program test_fortran_global_sum
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64
  implicit none
  integer, parameter :: nlon = 12, nlat = 10, nlev = 3
  integer :: ierr, nranks, glat, glon, total, status
  integer :: lat_first, lat_count, lon_first, lon_count, i, j, k
  type(tessera_decomp) :: d, one
  real(real64), allocatable :: q(:, :, :), whole(:, :, :)
  real(real32), allocatable :: q32(:, :, :), whole32(:, :, :)
  real(real64) :: s, serial, s32, serial32

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  call tessera_decomp_auto_grid(nranks, nlat, nlon, glat, glon, status)
  call check(status == TESSERA_OK .and. glat * glon == nranks, 'auto grid')
  call tessera_decomp_auto_grid(7, 2, 3, glat, glon, status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'auto grid: 7 ranks on 2 x 3 refused')
  call tessera_decomp_auto_grid(nranks, nlat, nlon, glat, glon)

  call tessera_decomp_create(d, MPI_COMM_WORLD, nlat, nlon, glat, glon)
  call tessera_decomp_create(one, MPI_COMM_SELF, nlat, nlon, 1, 1)
  call tessera_decomp_box(d, lat_first, lat_count, lon_first, lon_count)

  allocate(whole(nlon, nlat, nlev), whole32(nlon, nlat, nlev))
  do k = 1, nlev
    do i = 1, nlat
      do j = 1, nlon
        whole(j, i, k) = value(j, i, k)
      end do
    end do
  end do
  whole32 = real(whole, real32)
  allocate(q(lon_count, lat_count, nlev), q32(lon_count, lat_count, nlev))
  ! tessera_decomp_box gives 1-based firsts in Fortran.
  q = whole(lon_first:lon_first + lon_count - 1, lat_first:lat_first + lat_count - 1, :)
  q32 = whole32(lon_first:lon_first + lon_count - 1, lat_first:lat_first + lat_count - 1, :)

  call tessera_decomp_global_sum(one, whole, serial)
  call tessera_decomp_global_sum(d, q, s, status)
  call check(status == TESSERA_OK, 'global_sum real64')
  call check(transfer(s, 0_8) == transfer(serial, 0_8), 'real64 sum equals the serial sum bit for bit')
  call tessera_decomp_global_sum(one, whole32, serial32)
  call tessera_decomp_global_sum(d, q32, s32, status)
  call check(status == TESSERA_OK, 'global_sum real32')
  call check(transfer(s32, 0_8) == transfer(serial32, 0_8), 'real32 sum equals the serial sum bit for bit')

  call tessera_decomp_destroy(one)
  call tessera_decomp_destroy(d)
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a,i0,a)', 'test_fortran_global_sum: ', nranks, ' ranks, ', total, ' failed checks'
  call MPI_Finalize(ierr)
  if (total /= 0) error stop 1

contains

  real(real64) function value(j, i, k)
    integer, intent(in) :: j, i, k
    value = merge(-1.0_real64, 1.0_real64, mod(i + j + k, 3) == 0) * &
            scale(1.0_real64 + 0.001_real64 * (i * nlon + j), mod(k * 37 + i * 11 + j * 5, 90) - 45)
  end function
end program
