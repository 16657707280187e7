! The lon-first forms ([lon, lat] rank-1 arrays) against the deprecated latitude-first
! scalar forms they replace: on every process grid of the rank count (both orientations,
! and [0, 0]) a decomposition made each way (from a communicator and from a mesh) has the
! same global grid, process grid, coordinates and boxes (this rank's and every rank's),
! the automatic grid is the same grid, and halos made each way with widths that differ
! on all four sides have the same padded extents and, after an exchange, the same
! contents, which are the serial reference's (one rank, the whole grid) at this rank's
! place. A redistribution plan whose model grid is given as grid = [plon, plat] has the
! model boxes and moves the same values as one given by the deprecated grid_lat /
! grid_lon keywords, on every model grid of the rank count; giving both forms is an error
! naming both.
program test_fortran_lon_first
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real64
  implicit none
  integer, parameter :: nlon = 13, nlat = 10
  ! Halo widths per side, lon first: 2 left of i = 1, 1 right; 1 below j = 1, 2 above.
  integer, parameter :: before(2) = [2, 1], after(2) = [1, 2]
  integer :: ierr, nranks, total, status, plon, g_old(2), g_new(2)
  type(tessera_mesh) :: mesh

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)

  call compare([0, 0])
  do plon = 1, nranks
    if (mod(nranks, plon) == 0) call compare([plon, nranks / plon])
  end do

  ! The automatic grid: the same choice, lon first.
  call tessera_decomp_auto_grid(nranks, nlat, nlon, g_old(2), g_old(1))
  call tessera_decomp_auto_grid(nranks, [nlon, nlat], g_new, status)
  call check(status == TESSERA_OK .and. all(g_new == g_old), 'auto_grid: lon-first procs = latitude-first grid')
  call tessera_decomp_auto_grid(nranks, [3, 2], g_new, status)
  call tessera_decomp_auto_grid(nranks, 2, 3, g_old(2), g_old(1))
  call check(status == TESSERA_OK .and. all(g_new == g_old), 'auto_grid on a 3 x 2 grid: same choice')

  call tessera_mesh_destroy(mesh)
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a,i0,a)', 'test_fortran_lon_first: ', nranks, ' ranks, ', total, ' failed checks'
  call MPI_Finalize(ierr)
  if (total /= 0) error stop 1

contains

  ! The serial reference's value at global (i, j): distinct everywhere.
  real(real64) function value(i, j)
    integer, intent(in) :: i, j
    value = 100.0_real64 * j + i + 0.5_real64
  end function

  subroutine compare(procs)
    integer, intent(in) :: procs(2)
    type(tessera_decomp) :: d_old, d_new, m_old, m_new
    integer :: a, b, c, e, r, pair(2), first(2), count(2), mcount(2), cells
    character(len=32) :: grid
    write(grid, '(a,i0,a,i0,a)') ' on procs [', procs(1), ', ', procs(2), ']'

    call tessera_decomp_create(d_old, MPI_COMM_WORLD, nlat, nlon, procs(2), procs(1))
    call tessera_decomp_create(d_new, MPI_COMM_WORLD, [nlon, nlat], procs, status)
    call check(status == TESSERA_OK, 'decomp_create, lon first' // trim(grid))
    call tessera_decomp_create_from_mesh(m_old, mesh, nlat, nlon, procs(2), procs(1))
    call tessera_decomp_create_from_mesh(m_new, mesh, [nlon, nlat], procs, status)
    call check(status == TESSERA_OK, 'decomp_create_from_mesh, lon first' // trim(grid))

    call tessera_decomp_global(d_old, a, b)
    call tessera_decomp_global(d_new, pair)
    call check(a == nlat .and. b == nlon .and. all(pair == [nlon, nlat]), 'global' // trim(grid))
    call tessera_decomp_grid(d_old, a, b)
    call tessera_decomp_grid(d_new, pair)
    call check(all(pair == [b, a]) .and. pair(1) * pair(2) == nranks, 'process grid' // trim(grid))
    if (procs(1) > 0) call check(all(pair == procs), 'process grid is the one asked for' // trim(grid))
    call tessera_decomp_grid(m_new, first)
    call check(all(first == pair), 'process grid from the mesh' // trim(grid))
    call tessera_decomp_coords(d_old, a, b)
    call tessera_decomp_coords(d_new, first)
    call check(all(first == [b, a]), 'coords' // trim(grid))
    ! Rank r sits at (mod(r, plon), r / plon), lon first.
    call check(all(first == [mod(rank, pair(1)), rank / pair(1)]), 'coords of rank' // trim(grid))

    call tessera_decomp_box(d_old, a, b, c, e)
    call tessera_decomp_box(d_new, first, count)
    call check(all(first == [c, a]) .and. all(count == [e, b]), 'box' // trim(grid))
    cells = 0
    do r = 0, nranks - 1
      call tessera_decomp_box_of(d_old, r, a, b, c, e)
      call tessera_decomp_box_of(d_new, r, first, count, status)
      call check(status == TESSERA_OK .and. all(first == [c, a]) .and. all(count == [e, b]), 'box_of' // trim(grid))
      call tessera_decomp_box_of(m_new, r, pair, mcount)
      call check(all(pair == first) .and. all(mcount == count), 'box_of from the mesh' // trim(grid))
      cells = cells + count(1) * count(2)
    end do
    call check(cells == nlon * nlat, 'the boxes tile the grid' // trim(grid))

    call compare_halos(d_old, d_new, trim(grid))
    call compare_redists(d_new, procs, trim(grid))

    call tessera_decomp_destroy(d_old)
    call tessera_decomp_destroy(d_new)
    call tessera_decomp_destroy(m_old)
    call tessera_decomp_destroy(m_new)
  end subroutine

  subroutine compare_halos(d_old, d_new, grid)
    type(tessera_decomp), intent(in) :: d_old, d_new
    character(len=*), intent(in) :: grid
    type(tessera_decomp) :: whole
    type(tessera_halo) :: h_old, h_new, h_ref
    real(real64), allocatable, target :: q_old(:, :), q_new(:, :), ref(:, :)
    integer :: a, b, padded(2), first(2), count(2), i, j
    ! Old order: lat before/after, lon before/after.
    call tessera_halo_create(h_old, d_old, before(2), after(2), before(1), after(1), .true., TESSERA_POLE_REPLICATE)
    call tessera_halo_create(h_new, d_new, before, after, .true., TESSERA_POLE_REPLICATE, status)
    call check(status == TESSERA_OK, 'halo_create, lon first ' // grid)
    call tessera_halo_padded(h_old, a, b)
    call tessera_halo_padded(h_new, padded)
    call tessera_decomp_box(d_new, first, count)
    call check(all(padded == [b, a]) .and. all(padded == count + before + after), 'padded extents ' // grid)

    ! The serial reference: the whole grid on one rank, the same widths, exchanged.
    call tessera_decomp_create(whole, MPI_COMM_SELF, [nlon, nlat], [1, 1])
    call tessera_halo_create(h_ref, whole, before, after, .true., TESSERA_POLE_REPLICATE)
    allocate(ref(1 - before(1):nlon + after(1), 1 - before(2):nlat + after(2)), source=-1.0_real64)
    do j = 1, nlat
      do i = 1, nlon
        ref(i, j) = value(i, j)
      end do
    end do
    call tessera_halo_add_field(h_ref, ref)
    call tessera_halo_exchange(h_ref)

    allocate(q_old(1 - before(1):count(1) + after(1), 1 - before(2):count(2) + after(2)), source=-1.0_real64)
    allocate(q_new, mold=q_old)
    q_new = -2.0_real64
    do j = 1, count(2)
      do i = 1, count(1)
        q_old(i, j) = value(first(1) + i - 1, first(2) + j - 1)
        q_new(i, j) = q_old(i, j)
      end do
    end do
    call tessera_halo_add_field(h_old, q_old)
    call tessera_halo_add_field(h_new, q_new)
    call tessera_halo_exchange(h_old)
    call tessera_halo_exchange(h_new)
    call check(all(q_new == q_old), 'halo contents, lon-first halo = latitude-first halo ' // grid)
    call check(all(q_new == ref(first(1) - before(1):first(1) + count(1) - 1 + after(1), &
                                first(2) - before(2):first(2) + count(2) - 1 + after(2))), &
               'halo contents = the serial reference at this rank''s place ' // grid)

    call tessera_halo_destroy(h_old)
    call tessera_halo_destroy(h_new)
    call tessera_halo_destroy(h_ref)
    call tessera_decomp_destroy(whole)
  end subroutine

  ! Plans over `decomp` for a model on every rank with the model grid `procs` (lon first;
  ! [0, 0]: the default bands) given each way.
  subroutine compare_redists(decomp, procs, grid)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(in) :: procs(2)
    character(len=*), intent(in) :: grid
    type(tessera_redist) :: r_old, r_new, r_both
    real(real64), allocatable, target :: code(:, :), m_old(:, :), m_new(:, :)
    real(real64), pointer :: pc(:, :), pm(:, :)
    integer :: first(2), count(2), mfirst(2), mcount(2), nfirst(2), ncount(2), i, j
    call tessera_redist_create(r_old, decomp, nranks, grid_lat=procs(2), grid_lon=procs(1))
    call tessera_redist_create(r_new, decomp, nranks, grid=procs, ierr=status)
    call check(status == TESSERA_OK, 'redist_create, grid = [plon, plat] ' // grid)
    call tessera_redist_model_box(r_old, mfirst, mcount)
    call tessera_redist_model_box(r_new, nfirst, ncount)
    call check(all(nfirst == mfirst) .and. all(ncount == mcount), 'model box, grid = [plon, plat] ' // grid)
    ! Model rank r sits at (mod(r, plon), r / plon) of the model grid, as on the code's.
    if (procs(1) > 0) call check(all(ncount <= ([nlon, nlat] + procs - 1) / procs), 'model box of the grid ' // grid)

    call tessera_decomp_box(decomp, first, count)
    allocate(code(count(1), count(2)), m_old(mcount(1), mcount(2)), m_new(ncount(1), ncount(2)))
    do j = 1, count(2)
      do i = 1, count(1)
        code(i, j) = value(first(1) + i - 1, first(2) + j - 1)
      end do
    end do
    m_old = -1.0_real64; m_new = -2.0_real64
    pc => code
    pm => m_old
    call tessera_redist_add_field(r_old, pc, pm)
    call tessera_redist_to_model(r_old)
    pm => m_new
    call tessera_redist_add_field(r_new, pc, pm)
    call tessera_redist_to_model(r_new)
    call check(all(shape(m_new) == shape(m_old)), 'model array shapes ' // grid)
    if (all(shape(m_new) == shape(m_old))) then
      call check(all(m_new == m_old), 'model contents, grid = [plon, plat] = grid_lat / grid_lon ' // grid)
    end if
    do j = 1, ncount(2)
      do i = 1, ncount(1)
        call check(m_new(i, j) == value(nfirst(1) + i - 1, nfirst(2) + j - 1), 'model cell ' // grid)
      end do
    end do

    call tessera_redist_create(r_both, decomp, nranks, grid=procs, grid_lat=procs(2), ierr=status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT .and. &
               index(tessera_last_error(), 'grid = [plon, plat] and the deprecated grid_lat / grid_lon') > 0, &
               'redist_create with grid and grid_lat: an error naming both ' // grid)
    call tessera_redist_destroy(r_old)
    call tessera_redist_destroy(r_new)
  end subroutine
end program
