! The module from an mpi_f08 program: every procedure that takes or returns a
! communicator accepts type(MPI_Comm) as well as an integer handle, and both forms give
! the same mesh, decomposition and communicators; the lon-first decomposition (global =
! [nlon, nlat], procs = [plon, plat]) with type(MPI_Comm) is the latitude-first one;
! tessera_decomp_create_cart, _create_boxes and _create_split take type(MPI_Comm).
program test_fortran_f08
  use mpi_f08
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real64
  implicit none
  type(tessera_mesh) :: mesh, mesh_int
  type(tessera_decomp) :: d, d_int, d_lon
  type(MPI_Comm) :: world, dcomm, domain_comm, cart
  integer :: nranks, total, status, n, t, dm, dd, grid_lat, grid_lon, dcomm_int, r
  integer :: first(2), count(2), lat_first, lat_count, lon_first, lon_count, procs(2)
  real(real64) :: one, sum

  call MPI_Init()
  world = MPI_COMM_WORLD
  call MPI_Comm_rank(world, rank)
  call MPI_Comm_size(world, nranks)

  ! The mesh: type(MPI_Comm) and integer forms agree.
  call tessera_mesh_create(mesh, world, TESSERA_DATA_NONE, 1, nranks, status)
  call check(status == TESSERA_OK, 'mesh_create with type(MPI_Comm)')
  call tessera_mesh_create(mesh_int, world%MPI_VAL, TESSERA_DATA_NONE, 1, nranks, status)
  call check(status == TESSERA_OK, 'mesh_create with an integer handle')
  call tessera_mesh_config(mesh, dd, t, dm)
  call check(t == 1 .and. dm == nranks, 'mesh config')
  call tessera_mesh_comm(mesh, TESSERA_MESH_DOMAIN, domain_comm, status)
  call check(status == TESSERA_OK, 'mesh_comm into type(MPI_Comm)')
  call MPI_Comm_size(domain_comm, n)
  call check(n == nranks, 'the domain communicator has every rank')

  ! The decomposition over a type(MPI_Comm), and its communicator back as one.
  call tessera_decomp_create(d, world, 8, 12, nranks, 1, status)
  call check(status == TESSERA_OK, 'decomp_create with type(MPI_Comm)')
  call tessera_decomp_create(d_int, world%MPI_VAL, 8, 12, nranks, 1, status)
  call check(status == TESSERA_OK, 'decomp_create with an integer handle')
  call tessera_decomp_grid(d, grid_lat, grid_lon)
  call check(grid_lat == nranks .and. grid_lon == 1, 'decomp grid')
  call tessera_decomp_create(d_lon, world, [12, 8], [1, nranks], status)
  call check(status == TESSERA_OK, 'lon-first decomp_create with type(MPI_Comm)')
  call tessera_decomp_grid(d_lon, procs)
  call check(all(procs == [1, nranks]), 'lon-first decomp grid')
  do r = 0, nranks - 1
    call tessera_decomp_box_of(d_lon, r, first, count)
    call tessera_decomp_box_of(d, r, lat_first, lat_count, lon_first, lon_count)
    call check(all(first == [lon_first, lat_first]) .and. all(count == [lon_count, lat_count]), &
               'lon-first decomposition over type(MPI_Comm): the same boxes')
  end do
  call tessera_decomp_destroy(d_lon)

  ! The code's own decomposition over type(MPI_Comm): a (lon, lat) Cartesian communicator
  ! [nranks, 1], the remainder on the last rank (13 over 2: 6, 7), and the same boxes
  ! given one by one; tessera's rank order with create_split.
  call MPI_Cart_create(world, 2, [nranks, 1], [.true., .false.], .false., cart)
  call MPI_Comm_rank(cart, r)
  first = [r * (13 / nranks) + 1, 1]
  count = [13 / nranks, 8]
  if (r == nranks - 1) count(1) = 13 - r * (13 / nranks)
  call tessera_decomp_create_cart(d_lon, cart, [13, 8], TESSERA_CART_LON_LAT, status, split=TESSERA_SPLIT_LAST_RANK)
  call check(status == TESSERA_OK, 'create_cart with type(MPI_Comm)')
  call tessera_decomp_check_box(d_lon, first, count, status)
  call check(status == TESSERA_OK, 'check_box after create_cart with type(MPI_Comm)')
  call tessera_decomp_periodic(d_lon, procs)
  call check(all(procs == [1, 0]), 'periodic from the type(MPI_Comm) communicator')
  call tessera_decomp_destroy(d_lon)
  call tessera_decomp_create_boxes(d_lon, cart, [13, 8], first, count, status)
  call check(status == TESSERA_OK, 'create_boxes with type(MPI_Comm)')
  call tessera_decomp_check_box(d_lon, first, count, status)
  call check(status == TESSERA_OK, 'check_box after create_boxes with type(MPI_Comm)')
  call tessera_decomp_destroy(d_lon)
  call tessera_decomp_create_split(d_lon, world, [13, 8], [nranks, 1], TESSERA_SPLIT_LAST_RANK, status)
  call check(status == TESSERA_OK, 'create_split with type(MPI_Comm)')
  call tessera_decomp_check_box(d_lon, first, count, status)
  call check(status == TESSERA_OK, 'check_box after create_split with type(MPI_Comm)')
  call tessera_decomp_destroy(d_lon)
  call MPI_Comm_free(cart)
  call tessera_decomp_comm(d, dcomm, status)
  call check(status == TESSERA_OK, 'decomp_comm into type(MPI_Comm)')
  call tessera_decomp_comm(d_int, dcomm_int, status)
  call check(status == TESSERA_OK, 'decomp_comm into an integer')
  one = 1.0_real64
  call MPI_Allreduce(one, sum, 1, MPI_DOUBLE_PRECISION, MPI_SUM, dcomm)
  call check(nint(sum) == nranks, 'an all-reduce on the returned type(MPI_Comm)')

  call tessera_decomp_destroy(d)
  call tessera_decomp_destroy(d_int)
  call tessera_mesh_destroy(mesh)
  call tessera_mesh_destroy(mesh_int)
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, world)
  if (rank == 0) print '(a,i0,a,i0,a)', 'test_fortran_f08: ', nranks, ' ranks, ', total, ' failed checks'
  call MPI_Finalize()
  if (total /= 0) error stop 1

end program
