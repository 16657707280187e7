! Fields in the caller's dimension order (docs/fortran.md, "Bring your own array layout"),
! at 1, 2 and 4 ranks:
!  - halo exchange of q(i,j,k) real64, q(k,i,j) real32, a 2-D field and the allocatable
!    component st%q(i,k,j) of a scalar derived type, with different lon and lat widths,
!    each cell (interior, halo, corners) against the serial reference computed here from
!    the global field (periodic in lon, zero beyond the poles);
!  - a checkpoint saved from q(i,j,k) and q(k,i,j) on latitude bands, loaded into the
!    other layouts (q(k,i,j), q(i,j,k)) on longitude strips, compared cell by cell;
!  - the lon-first forms of tessera_decomp_box and tessera_halo_padded;
!  - the Fortran-worded errors: dims that name no lon/lat pair, extents that are not the
!    padded ones (1-based dims, lon x lat), on every rank, registering nothing; a load's
!    stored shape that is not the field's, and a missing dataset, with shapes lon first;
!    a local array that is not the box in a scatter, a global sum and a redistribution
!    (extents in declaration order, 1-based boxes), field indices counted from 1, an
!    overflowing process grid named lon first.
program test_fortran_layouts
  use mpi
  use tessera
  use tessera_test_support, only: itoa
  use, intrinsic :: iso_fortran_env, only: real32, real64, error_unit
  implicit none
  integer, parameter :: NLAT = 10, NLON = 12, NLEV = 3, HLAT = 1, HLON = 2
  type :: model_state
    real(real64), allocatable :: q(:, :, :)   ! (lon, lev, lat)
  end type
  type(tessera_mesh) :: mesh
  type(tessera_decomp) :: bands, strips, taller
  type(tessera_halo) :: halo, halo_strips, halo_taller
  type(tessera_checkpoint) :: ckpt
  type(model_state), target :: st
  real(real64), allocatable, target :: q_ijk(:, :, :), q2(:, :), load_kij(:, :, :), block(:, :), tall(:, :, :)
  real(real32), allocatable, target :: q_kij(:, :, :), load_ijk(:, :, :), wrong(:, :, :), whole(:, :, :)
  integer :: ierr, nranks, rank, failures, count
  integer :: lat1, nlat_loc, lon1, nlon_loc, i, j, k, nlat_b, nlon_b, lat1_b, lon1_b, first(2), extent(2)
  character(len=256) :: dir
  character(len=:), allocatable :: root

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  failures = 0
  dir = '.'
  if (command_argument_count() >= 1) call get_command_argument(1, dir)
  root = trim(dir) // '/layouts_np' // achar(iachar('0') + nranks)

  call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)
  call tessera_decomp_create_from_mesh(bands, mesh, NLAT, NLON, nranks, 1)
  call tessera_halo_create(halo, bands, HLAT, HLAT, HLON, HLON, .true., TESSERA_POLE_ZERO)
  call tessera_decomp_box(bands, lat1, nlat_loc, lon1, nlon_loc)
  ! The lon-first forms give the same numbers as the latitude-first ones.
  call tessera_decomp_box(bands, first, extent)
  if (any(first /= [lon1, lat1]) .or. any(extent /= [nlon_loc, nlat_loc])) call fail('lon-first tessera_decomp_box')
  call tessera_halo_padded(halo, extent)
  if (any(extent /= [nlon_loc + 2 * HLON, nlat_loc + 2 * HLAT])) call fail('lon-first tessera_halo_padded')

  ! ---- halo exchange in four layouts, real32 and real64 ----
  allocate(q_ijk(1-HLON:nlon_loc+HLON, 1-HLAT:nlat_loc+HLAT, NLEV), q2(1-HLON:nlon_loc+HLON, 1-HLAT:nlat_loc+HLAT))
  allocate(q_kij(NLEV, 1-HLON:nlon_loc+HLON, 1-HLAT:nlat_loc+HLAT), st%q(1-HLON:nlon_loc+HLON, NLEV, 1-HLAT:nlat_loc+HLAT))
  q_ijk = -999; q2 = -999; q_kij = -999; st%q = -999
  do j = 1, nlat_loc
    do i = 1, nlon_loc
      do k = 1, NLEV
        q_ijk(i, j, k) = f(lon1 + i - 1, lat1 + j - 1, k)
        q_kij(k, i, j) = real(f(lon1 + i - 1, lat1 + j - 1, k), real32)
        st%q(i, k, j) = -f(lon1 + i - 1, lat1 + j - 1, k)
      end do
      q2(i, j) = f(lon1 + i - 1, lat1 + j - 1, 0)
    end do
  end do
  call tessera_halo_add_field(halo, q_ijk)
  call tessera_halo_add_field(halo, q_kij, lon_dim=2, lat_dim=3)
  call tessera_halo_add_field(halo, q2)
  call tessera_halo_add_field(halo, st%q, lon_dim=1, lat_dim=3)
  call tessera_halo_exchange(halo)
  do j = 1 - HLAT, nlat_loc + HLAT
    do i = 1 - HLON, nlon_loc + HLON
      call check(q2(i, j), expected(i, j, 0), 'q2(i,j)', i, j, 0)
      do k = 1, NLEV
        call check(q_ijk(i, j, k), expected(i, j, k), 'q(i,j,k)', i, j, k)
        call check(real(q_kij(k, i, j), real64), real(real(expected(i, j, k), real32), real64), 'q(k,i,j)', i, j, k)
        call check(st%q(i, k, j), -expected(i, j, k), 'st%q(i,k,j)', i, j, k)
      end do
    end do
  end do

  ! ---- checkpoint: saved from two layouts on bands, loaded into the others on strips ----
  call tessera_checkpoint_begin_save(ckpt, mesh, root, 1, TESSERA_LAYOUT_SHARED)
  call tessera_checkpoint_add_field(ckpt, 'q64', halo, q_ijk)
  call tessera_checkpoint_add_field(ckpt, 'q32', halo, q_kij, lon_dim=2, lat_dim=3)
  call tessera_checkpoint_commit(ckpt)
  call tessera_checkpoint_destroy(ckpt)

  call tessera_decomp_create_from_mesh(strips, mesh, NLAT, NLON, 1, nranks)
  call tessera_halo_create(halo_strips, strips, HLAT, HLAT, HLON, HLON, .true., TESSERA_POLE_ZERO)
  call tessera_decomp_box(strips, lat1, nlat_loc, lon1, nlon_loc)
  allocate(load_kij(NLEV, 1-HLON:nlon_loc+HLON, 1-HLAT:nlat_loc+HLAT), load_ijk(1-HLON:nlon_loc+HLON, 1-HLAT:nlat_loc+HLAT, NLEV))
  load_kij = -999; load_ijk = -999
  call tessera_checkpoint_begin_load(ckpt, mesh, root)
  call tessera_checkpoint_add_field(ckpt, 'q64', halo_strips, load_kij, lon_dim=2, lat_dim=3)
  call tessera_checkpoint_add_field(ckpt, 'q32', halo_strips, load_ijk)
  call tessera_checkpoint_commit(ckpt)
  call tessera_checkpoint_destroy(ckpt)
  do j = 1 - HLAT, nlat_loc + HLAT
    do i = 1 - HLON, nlon_loc + HLON
      do k = 1, NLEV
        if (i >= 1 .and. i <= nlon_loc .and. j >= 1 .and. j <= nlat_loc) then
          call check(load_kij(k, i, j), f(lon1 + i - 1, lat1 + j - 1, k), 'loaded q(k,i,j)', i, j, k)
          call check(real(load_ijk(i, j, k), real64), real(real(f(lon1 + i - 1, lat1 + j - 1, k), real32), real64), &
                     'loaded q(i,j,k)', i, j, k)
        else   ! a load writes the interior only
          call check(load_kij(k, i, j), -999.0_real64, 'loaded q(k,i,j) halo', i, j, k)
        end if
      end do
    end do
  end do

  ! ---- errors, in the caller's terms (every rank makes the same mistakes) ----
  ! (The expected texts use nlon_b, nlat_b: asked for here, as any tessera call forgets
  ! the last error.)
  call tessera_decomp_box(bands, lat1_b, nlat_b, lon1_b, nlon_b)
  call tessera_halo_clear_fields(halo)
  call tessera_halo_add_field(halo, q_kij, ierr, lon_dim=2, lat_dim=2)
  call expect_error(ierr, TESSERA_ERR_INVALID_ARGUMENT, &
                    "tessera_halo_add_field: 'field': lon_dim = 2 and lat_dim = 2 are not two different dims " // &
                    "of the rank-3 array (1 to 3)")
  call tessera_halo_add_field(halo, q_kij, ierr, lon_dim=4)
  call expect_error(ierr, TESSERA_ERR_INVALID_ARGUMENT, "lon_dim = 4 and lat_dim = 2 are not two different dims")
  ! q(k,i,j) registered as if it were q(i,j,k): dims 1 and 2 are (NLEV, lon) wide.
  call tessera_halo_add_field(halo, q_kij, ierr)
  call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_halo_add_field: 'field': dims 1 (lon) and 2 (lat) " // &
                    "have extents " // itoa(NLEV) // " and " // itoa(nlon_b + 2 * HLON) // "; this rank's box " // &
                    "plus the halo is " // itoa(nlon_b + 2 * HLON) // " x " // itoa(nlat_b + 2 * HLAT) // &
                    " (lon x lat, tessera_halo_padded)")
  allocate(wrong(1-HLON:nlon_b+HLON, 1-HLAT:nlat_b+HLAT+1, 1))
  call tessera_halo_add_field(halo, wrong, ierr)
  call expect_error(ierr, TESSERA_ERR_SHAPE, "dims 1 (lon) and 2 (lat) have extents " // &
                    itoa(nlon_b + 2 * HLON) // " and " // itoa(nlat_b + 2 * HLAT + 1))
  call tessera_checkpoint_begin_save(ckpt, mesh, root, 2, TESSERA_LAYOUT_SHARED)
  call tessera_checkpoint_add_field(ckpt, 'w', halo, wrong, ierr, lon_dim=3, lat_dim=1)
  call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_checkpoint_add_field: field 'w': dims 3 (lon) and " // &
                    "1 (lat) have extents 1 and " // itoa(nlon_b + 2 * HLON))
  call tessera_checkpoint_destroy(ckpt)
  call tessera_halo_num_fields(halo, count)
  if (count /= 0) call fail('a rejected field was registered')
  ! Messages from the C side to a Fortran caller: dims in declaration order, 1-based
  ! ranges, lon first, the procedure's Fortran name.
  ! (A collective's argument errors are agreed: every rank reports rank 0's.)
  call tessera_decomp_box_of(bands, 0, lat1_b, nlat_b, lon1_b, nlon_b)
  allocate(whole(NLON, NLAT + 1, 1))
  deallocate(wrong)
  allocate(wrong(nlon_b + 2 * HLON, nlat_b + 2 * HLAT + 1, 1))
  call tessera_halo_gather(halo, wrong, whole, 0, ierr)
  call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_halo_gather: gather: the field: array of extents (" // &
                    itoa(nlon_b + 2 * HLON) // ", " // itoa(nlat_b + 2 * HLAT + 1) // ", 1) should begin with the " // &
                    "padded (lon, lat) extents (" // itoa(nlon_b + 2 * HLON) // ", " // itoa(nlat_b + 2 * HLAT) // &
                    ") of this rank (lon " // itoa(lon1_b) // ":" // itoa(lon1_b + nlon_b - 1) // " x lat " // &
                    itoa(lat1_b) // ":" // itoa(lat1_b + nlat_b - 1) // " plus halo lon 2+2, lat 1+1)")
  allocate(block(2, 3))
  call tessera_checkpoint_begin_save(ckpt, mesh, root, 3, TESSERA_LAYOUT_SHARED)
  call tessera_checkpoint_add_array(ckpt, 'b', block, [2, 3], [0, 1], '', ierr)
  call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_checkpoint_add_array: array 'b': local block (2, 3) at " // &
                    "first index (1, 2) lies outside the global shape (2, 3)")
  ! A global array too large to address (2^60 + 2^30 real64), in declaration order.
  call tessera_checkpoint_add_array(ckpt, 'b', block, [2**30, 2**30 + 1], [0, 0], '', ierr)
  call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_checkpoint_add_array: array 'b': global shape (1073741824, " // &
                    "1073741825): 1152921505680588800 elements of 8 bytes do not fit in the address space")
  call tessera_checkpoint_destroy(ckpt)
  call tessera_decomp_create(strips, MPI_COMM_WORLD, NLAT, NLON, nranks + 1, 1, ierr)
  call expect_error(ierr, TESSERA_ERR_INVALID_ARGUMENT, "tessera_decomp_create: process grid [plon, plat] = [1, " // &
                    itoa(nranks + 1) // "] must hold exactly the " // itoa(nranks) // " ranks of the communicator")
  call tessera_decomp_create(strips, MPI_COMM_WORLD, [NLON, NLAT], [huge(0), 2], ierr)
  call expect_error(ierr, TESSERA_ERR_INVALID_ARGUMENT, "tessera_decomp_create: process grid [plon, plat] = [" // &
                    itoa(huge(0)) // ", 2] overflows int")
  call check_box_errors()
  ! A load's messages about the file: shapes as the Fortran caller declared them, lon
  ! first. The file's q64 is (NLON, NLAT, NLEV); a grid two rows taller wants another.
  call tessera_decomp_create_from_mesh(taller, mesh, [NLON, NLAT + 2], [1, nranks])
  call tessera_halo_create(halo_taller, taller, [HLON, HLAT], [HLON, HLAT], .true., TESSERA_POLE_ZERO)
  call tessera_halo_padded(halo_taller, extent)
  allocate(tall(extent(1), extent(2), NLEV))
  call tessera_checkpoint_begin_load(ckpt, mesh, root)
  call tessera_checkpoint_add_field(ckpt, 'q64', halo_taller, tall)
  call tessera_checkpoint_commit(ckpt, ierr)
  call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_checkpoint_commit: checkpoint '")
  call expect_error(ierr, TESSERA_ERR_SHAPE, "': dataset /model/q64 has shape (" // itoa(NLON) // ", " // &
                    itoa(NLAT) // ", " // itoa(NLEV) // ") but 'q64' has global shape (" // itoa(NLON) // ", " // &
                    itoa(NLAT + 2) // ", " // itoa(NLEV) // ")")
  call tessera_checkpoint_destroy(ckpt)
  call tessera_checkpoint_begin_load(ckpt, mesh, root)
  call tessera_checkpoint_add_field(ckpt, 'absent', halo_taller, tall)
  call tessera_checkpoint_commit(ckpt, ierr)
  call expect_error(ierr, TESSERA_ERR_INVALID_ARGUMENT, "' has no dataset /model/absent for parameter 'absent' " // &
                    "(global shape (" // itoa(NLON) // ", " // itoa(NLAT + 2) // ", " // itoa(NLEV) // "))")
  call tessera_checkpoint_destroy(ckpt)
  call tessera_halo_destroy(halo_taller)
  call tessera_decomp_destroy(taller)

  call tessera_halo_destroy(halo_strips)
  call tessera_halo_destroy(halo)
  call tessera_decomp_destroy(strips)
  call tessera_decomp_destroy(bands)
  call tessera_mesh_destroy(mesh)
  call MPI_Allreduce(MPI_IN_PLACE, failures, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a,i0)', 'test_fortran_layouts: ranks ', nranks, ', failures ', failures
  call MPI_Finalize(ierr)
  if (failures /= 0) error stop 1

contains

  ! A local array one longitude too wide where a decomposition's box is wanted (scatter,
  ! global sum: agreed, so rank 0's box in every rank's message; a redistribution's code
  ! field: this rank's own box), and field indices outside those registered: counted
  ! from 1, lon first.
  subroutine check_box_errors()
    type(tessera_redist) :: redist
    real(real64), allocatable, target :: local(:, :, :), global(:, :)
    real(real64), pointer :: code(:, :, :), model(:, :, :)
    real(real64) :: total
    integer :: own_first(2), own_count(2)
    character(len=:), allocatable :: box0
    call tessera_decomp_box_of(bands, 0, first, extent)
    box0 = "(lon " // itoa(first(1)) // ":" // itoa(first(1) + extent(1) - 1) // " x lat " // itoa(first(2)) // &
           ":" // itoa(first(2) + extent(2) - 1) // ")"
    call tessera_decomp_box(bands, own_first, own_count)
    allocate(local(own_count(1) + 1, own_count(2), 1), global(NLON, NLAT))
    global = 0
    local = 0
    call tessera_decomp_scatter(bands, global, local(:, :, 1), 0, ierr)
    call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_decomp_scatter: scatter: the local array: array of extents (" // &
                      itoa(extent(1) + 1) // ", " // itoa(extent(2)) // ") should begin with the (lon, lat) extents (" // &
                      itoa(extent(1)) // ", " // itoa(extent(2)) // ") of this rank " // box0)
    call tessera_decomp_global_sum(bands, local(:, :, 1), total, ierr)
    call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_decomp_global_sum: the local array: array of extents (" // &
                      itoa(extent(1) + 1) // ", " // itoa(extent(2)) // ") should begin with the (lon, lat) extents (" // &
                      itoa(extent(1)) // ", " // itoa(extent(2)) // ") of this rank " // box0)

    call tessera_redist_create(redist, bands, 1)
    allocate(model(NLON, NLAT, 1))
    code => local
    call tessera_redist_add_field(redist, code, model, ierr)
    call expect_error(ierr, TESSERA_ERR_SHAPE, "tessera_redist_add_field: field 1: the code array: array of extents (" // &
                      itoa(own_count(1) + 1) // ", " // itoa(own_count(2)) // ", 1) should begin with the (lon, lat) " // &
                      "extents (" // itoa(own_count(1)) // ", " // itoa(own_count(2)) // ") of this rank (lon " // &
                      itoa(own_first(1)) // ":" // itoa(own_first(1) + own_count(1) - 1) // " x lat " // &
                      itoa(own_first(2)) // ":" // itoa(own_first(2) + own_count(2) - 1) // ")")
    call tessera_redist_destroy(redist)
    deallocate(model)

    call tessera_halo_clear_fields(halo)
    call tessera_halo_add_field(halo, q2)
    call tessera_halo_set_vector_pair(halo, 1, 3, ierr)
    call expect_error(ierr, TESSERA_ERR_INVALID_ARGUMENT, "tessera_halo_set_vector_pair: field index 3 is not one " // &
                      "of the 1 registered fields 1:1")
    call tessera_halo_set_vector_pair(halo, 1, 1, ierr)
    call expect_error(ierr, TESSERA_ERR_INVALID_ARGUMENT, "u and v are the same field (1)")
    call tessera_halo_clear_fields(halo)
  end subroutine

  ! The global field: distinct in every cell and level (1-based global i, j).
  pure real(real64) function f(i, j, k)
    integer, intent(in) :: i, j, k
    f = 1000.0_real64 * k + 20.0_real64 * j + i + 0.25_real64
  end function

  ! The serial reference of local cell (i, j) of the bands layout after an exchange:
  ! periodic in longitude, zero beyond the poles.
  real(real64) function expected(i, j, k)
    integer, intent(in) :: i, j, k
    integer :: gi, gj
    gi = modulo(lon1 + i - 2, NLON) + 1
    gj = lat1 + j - 1
    expected = 0
    if (gj >= 1 .and. gj <= NLAT) expected = f(gi, gj, k)
  end function

  subroutine check(got, want, what, i, j, k)
    real(real64), intent(in) :: got, want
    character(len=*), intent(in) :: what
    integer, intent(in) :: i, j, k
    if (got /= want) then
      if (failures < 10) write(error_unit, '(a,i0,3a,3(i0,a),2(g0,a))') 'rank ', rank, ': ', what, ' at (', i, ',', &
                                 j, ',', k, '): ', got, ' (expected ', want, ')'
      failures = failures + 1
    end if
  end subroutine

  subroutine expect_error(status, code, text)
    integer, intent(in) :: status, code
    character(len=*), intent(in) :: text
    if (status /= code .or. index(tessera_last_error(), text) == 0) then
      call fail('expected status ' // itoa(code) // ' and a message containing "' // text // '"; got ' // &
                itoa(status) // ': "' // tessera_last_error() // '"')
    end if
  end subroutine

  subroutine fail(message)
    character(len=*), intent(in) :: message
    write(error_unit, '(a,i0,2a)') 'rank ', rank, ': ', message
    failures = failures + 1
  end subroutine
end program
