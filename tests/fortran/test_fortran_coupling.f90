! The redistribution plan from Fortran (tessera_redist_*): the code's 2 x 2 blocks at 4
! ranks (bands at 1 and 2) to a model on 1 and 2 ranks in latitude bands and to a rank
! list; a real32 field with levels and a real64 field in one transfer, blocking and
! split. Every model cell equals the global field's; the round trip is bit-exact.
! Errors through ierr on every rank: M > N, a duplicate in the rank list, a model grid
! that does not hold the model ranks.
program test_fortran_coupling
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64
  implicit none
  integer, parameter :: GLOBAL_LAT = 9, GLOBAL_LON = 10, NLEV = 3
  type(tessera_decomp) :: decomp
  type(tessera_redist) :: redist
  integer :: ierr, nranks, total, nmodel, status, glat, glon, lat1, nlat, lon1, nlon
  integer :: m, msize, mcomm

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  glat = nranks; glon = 1
  if (nranks == 4) then
    glat = 2; glon = 2
  end if
  call tessera_decomp_create(decomp, MPI_COMM_WORLD, GLOBAL_LAT, GLOBAL_LON, glat, glon)
  call tessera_decomp_box(decomp, lat1, nlat, lon1, nlon)

  do nmodel = 1, min(2, nranks)
    call tessera_redist_create(redist, decomp, nmodel)
    call round_trip(.false.)
    call round_trip(.true.)
    call tessera_redist_destroy(redist)
  end do
  call tessera_redist_create(redist, decomp, 0, model_ranks=[nranks - 1])
  call tessera_redist_model_size(redist, msize)
  call tessera_redist_model_rank(redist, m)
  call tessera_redist_model_comm(redist, mcomm)
  call check(msize == 1 .and. ((m == 0) .eqv. (rank == nranks - 1)), 'rank list [N - 1]')
  call check((m >= 0) .eqv. (mcomm /= MPI_COMM_NULL), 'model communicator on the model rank only')
  call round_trip(.false.)
  call tessera_redist_destroy(redist)

  ! Errors, the same status on every rank.
  call tessera_redist_create(redist, decomp, nranks + 1, ierr=status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT .and. index(tessera_last_error(), 'M > N') > 0, 'M > N')
  call tessera_redist_create(redist, decomp, 0, model_ranks=[0, 0], ierr=status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'duplicate rank list')
  call tessera_redist_create(redist, decomp, 1, grid_lat=2, grid_lon=1, ierr=status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT .and. index(tessera_last_error(), 'model grid 2 (lat) x 1 (lon)') > 0, &
             'model grid 2x1 for one model rank')

  call tessera_decomp_destroy(decomp)
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a,i0,a)', 'test_fortran_coupling: ', nranks, ' ranks, ', total, ' failed checks'
  call MPI_Finalize(ierr)
  if (total /= 0) error stop 1

contains

  real(real64) function value(field, lev, i, j)
    integer, intent(in) :: field, lev, i, j
    value = 1000.0_real64 * field + 100 * lev + 10 * i + 0.5_real64 * j + 0.25_real64
  end function

  subroutine round_trip(split)
    logical, intent(in) :: split
    real(real32), allocatable, target :: t(:, :, :), t_model(:, :, :), t_back(:, :, :)
    real(real64), allocatable, target :: u(:, :), u_model(:, :), u_back(:, :)
    real(real32), pointer :: pt(:, :, :), pm(:, :, :)
    real(real64), pointer :: qu(:, :), qm(:, :)
    integer :: mlat1, mnlat, mlon1, mnlon, i, j, k, count, first(2), box_count(2)
    logical :: flying
    call tessera_redist_model_box(redist, mlat1, mnlat, mlon1, mnlon)
    call tessera_redist_model_box(redist, first, box_count)
    call check(all(first == [mlon1, mlat1]) .and. all(box_count == [mnlon, mnlat]), 'model box, lon first')
    allocate(t(nlon, nlat, NLEV), t_back(nlon, nlat, NLEV), t_model(mnlon, mnlat, NLEV))
    allocate(u(nlon, nlat), u_back(nlon, nlat), u_model(mnlon, mnlat))
    do k = 1, NLEV
      do i = 1, nlat
        do j = 1, nlon
          t(j, i, k) = real(value(0, k, lat1 + i - 1, lon1 + j - 1), real32)
          u(j, i) = value(1, 0, lat1 + i - 1, lon1 + j - 1)
        end do
      end do
    end do
    pt => t; pm => t_model; qu => u; qm => u_model
    call tessera_redist_clear_fields(redist)
    call tessera_redist_add_field(redist, pt, pm)
    call tessera_redist_add_field(redist, qu, qm)
    call tessera_redist_num_fields(redist, count)
    call check(count == 2, 'two fields registered')
    if (split) then
      call tessera_redist_start_to_model(redist)
      call tessera_redist_in_flight(redist, flying)
      call check(flying, 'in flight')
      call tessera_redist_finish(redist)
    else
      call tessera_redist_to_model(redist)
    end if
    do i = 1, mnlat
      do j = 1, mnlon
        call check(t_model(j, i, 2) == real(value(0, 2, mlat1 + i - 1, mlon1 + j - 1), real32) .and. &
                   u_model(j, i) == value(1, 0, mlat1 + i - 1, mlon1 + j - 1), 'model cell')
      end do
    end do
    pt => t_back; qu => u_back
    call tessera_redist_clear_fields(redist)
    call tessera_redist_add_field(redist, pt, pm)
    call tessera_redist_add_field(redist, qu, qm)
    call tessera_redist_to_code(redist)
    call check(all(t_back == t) .and. all(u_back == u), 'round trip exact')
    call tessera_redist_clear_fields(redist)
  end subroutine

end program
