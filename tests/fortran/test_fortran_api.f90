! The Fortran module `tessera` on its own: every generic for real32 and real64, arrays of
! rank 2 to 4, halo contents after an exchange, the adjoint identity, scatter/gather, a
! checkpoint round trip, and the error paths with `ierr` (null handle, non-contiguous
! array, mismatched shape). Runs at 1, 2 and 4 ranks; exit status 1 on any failure.
program test_fortran_api
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64
  implicit none

  integer, parameter :: nlat = 45, nlon = 8, nlev = 3
  integer :: nranks, ierr, status
  character(len=256) :: scratch

  call start_test(nranks)
  scratch = scratch_directory('fortran_api', nranks)

  call test_strings_and_errors()
  call test_mesh_and_decomp()
  call test_halo()
  call test_checkpoint()

  call finish_test('test_fortran_api', nranks)

contains

  real(real64) function encode(lev, i, j)
    integer, intent(in) :: lev, i, j
    encode = 10000.0_real64 * lev + 100.0_real64 * i + j + 1.0_real64
  end function

  subroutine test_strings_and_errors()
    type(tessera_mesh) :: mesh
    integer :: r
    call check(tessera_error_string(TESSERA_OK) == 'ok', 'error_string ok')
    call check(tessera_error_string(TESSERA_ERR_SHAPE) == 'shape', 'error_string shape')
    call check(tessera_error_string(42) == 'unknown', 'error_string unknown')
    call check(index(tessera_version(), '.') > 0, 'version')
    ! A null handle: the status comes back through ierr, the message names the function.
    call tessera_mesh_rank(mesh, TESSERA_MESH_TP, r, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'null mesh handle')
    call check(index(tessera_last_error(), 'tessera_mesh_rank') > 0, 'message names the function')
    call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks + 1, status)
    call check(status == TESSERA_ERR_CONFIG, 'mesh not divisible')
    call tessera_mesh_create_from_file(mesh, MPI_COMM_WORLD, trim(scratch) // '/none.yaml', status)
    call check(status == TESSERA_ERR_IO, 'missing mesh config')
    call tessera_mesh_destroy(mesh, status)
    call check(status == TESSERA_OK, 'destroying a null handle is a no-op')
    call test_model_errors()
  end subroutine

  ! Model inference error paths (the success path is tested through C in
  ! tests/capi/test_capi_model.cpp).
  subroutine test_model_errors()
    type(tessera_mesh) :: mesh
    type(tessera_model) :: model
    real(real32), allocatable, target :: x(:, :, :), y(:, :, :)
    integer :: channels, a, b, c, d
    call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)
    call tessera_model_load(model, mesh, trim(scratch) // '/no_such_model', status)
    call check(status == TESSERA_ERR_IO, 'model load from a missing checkpoint')
    allocate(x(8, 4, 2), y(8, 4, 2))
    x = 0
    call tessera_model_predict(model, x, y, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'predict on a null model')
    call tessera_model_forward(model, x(1:4, :, :), y(1:4, :, :), status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'non-contiguous model field')
    call tessera_model_forward(model, x, y(:, 1:2, :), status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'output shape differs from input')
    call tessera_model_info(model, channels, a, b, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'info on a null model')
    call tessera_model_box(model, a, b, c, d, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'box on a null model')
    call tessera_model_destroy(model, status)
    call check(status == TESSERA_OK, 'destroying a null model is a no-op')
    call tessera_mesh_destroy(mesh)
  end subroutine

  subroutine test_mesh_and_decomp()
    type(tessera_mesh) :: mesh
    type(tessera_decomp) :: decomp
    integer :: data, tensor, domain, r, s, comm, cmp, lat1, nl, lon1, nn, a, b, k, first
    call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1, status)
    call check(status == TESSERA_OK, 'mesh create')
    call tessera_mesh_config(mesh, data, tensor, domain, status)
    call check(status == 0 .and. data == TESSERA_DATA_DDP .and. tensor == 1 .and. domain == 1, 'mesh config')
    call tessera_mesh_rank(mesh, TESSERA_MESH_DP, r, status)
    call tessera_mesh_size(mesh, TESSERA_MESH_DP, s, status)
    call check(r == rank .and. s == nranks, 'dp rank and size')
    call tessera_mesh_comm(mesh, TESSERA_MESH_WORLD, comm, status)
    call MPI_Comm_compare(comm, MPI_COMM_WORLD, cmp, ierr)
    call check(status == 0 .and. cmp == MPI_CONGRUENT, 'mesh world comm')
    call tessera_mesh_destroy(mesh)

    call tessera_decomp_create(decomp, MPI_COMM_WORLD, nlat, nlon, 0, 0, status)
    call check(status == TESSERA_OK, 'decomp create')
    call tessera_decomp_rank(decomp, r)
    call tessera_decomp_size(decomp, s)
    call check(r == rank .and. s == nranks, 'decomp rank and size')
    call tessera_decomp_global(decomp, a, b)
    call check(a == nlat .and. b == nlon, 'decomp global')
    call tessera_decomp_grid(decomp, a, b)
    call check(a == nranks .and. b == 1, 'decomp grid')
    call tessera_decomp_coords(decomp, a, b)
    call check(a == rank .and. b == 0, 'decomp coords')
    call tessera_decomp_comm(decomp, comm)
    call MPI_Comm_compare(comm, MPI_COMM_WORLD, cmp, ierr)
    call check(cmp == MPI_CONGRUENT, 'decomp comm')
    first = 1
    do k = 0, nranks - 1
      call tessera_decomp_box_of(decomp, k, lat1, nl, lon1, nn)
      call check(lat1 == first .and. nl == nlat / nranks + merge(1, 0, k < mod(nlat, nranks)) .and. &
                 lon1 == 1 .and. nn == nlon, 'box_of (1-based, shard_range)')
      first = first + nl
    end do
    call tessera_decomp_box_of(decomp, nranks, lat1, nl, lon1, nn, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'box_of a rank outside the communicator')
    call tessera_decomp_destroy(decomp)
    call tessera_decomp_create(decomp, MPI_COMM_WORLD, nlat, nlon, nranks + 1, 1, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'bad process grid')
  end subroutine

  subroutine test_halo()
    type(tessera_decomp) :: decomp
    type(tessera_halo) :: halo
    real(real64), allocatable, target :: q(:, :, :), x(:, :, :), y(:, :, :), ax(:, :, :), aty(:, :, :), g(:, :, :)
    real(real32), allocatable, target :: c(:, :), w(:, :, :, :)
    real(real64), allocatable, target :: gl(:, :, :)
    integer :: lat1, nl, lon1, nn, plat, plon, i, j, l, si, sj, n, bad
    real(real64) :: sums(2), totals(2)

    call tessera_decomp_create(decomp, MPI_COMM_WORLD, nlat, nlon, 0, 0)
    call tessera_halo_create(halo, decomp, 1, 1, 1, 1, .true., TESSERA_POLE_REPLICATE)
    call tessera_decomp_box(decomp, lat1, nl, lon1, nn)
    call tessera_halo_padded(halo, plat, plon)
    call check(plat == nl + 2 .and. plon == nn + 2, 'padded extents')

    ! q(lon, lat, lev) real64 and c(lon, lat) real32, halo index 0 and n+1.
    allocate(q(0:nn + 1, 0:nl + 1, nlev), c(0:nn + 1, 0:nl + 1))
    q = -7; c = -7
    do l = 1, nlev
      do j = 1, nl
        do i = 1, nn
          q(i, j, l) = encode(l, lat1 + j - 2, lon1 + i - 2)
        end do
      end do
    end do
    c(1:nn, 1:nl) = real(q(1:nn, 1:nl, 1), real32)
    call tessera_halo_add_field(halo, q)
    call tessera_halo_add_field(halo, c)
    call tessera_halo_num_fields(halo, n)
    call check(n == 2, 'two fields registered')

    ! Error paths: non-contiguous section, wrong padded shape, 4-D field with a wrong lat.
    call tessera_halo_add_field(halo, q(0:nn, :, :), status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'non-contiguous field')
    call check(index(tessera_last_error(), 'contiguous') > 0, 'non-contiguous message')
    allocate(w(plon, plat + 1, 2, 2))
    call tessera_halo_add_field(halo, w, status)
    call check(status == TESSERA_ERR_SHAPE, 'mismatched field shape')
    call tessera_halo_num_fields(halo, n)
    call check(n == 2, 'failed registrations add nothing')

    call tessera_halo_start(halo)
    call tessera_halo_finish(halo)
    bad = 0
    do l = 1, nlev
      do j = 0, nl + 1
        do i = 0, nn + 1
          si = min(max(lat1 + j - 2, 0), nlat - 1)
          sj = modulo(lon1 + i - 2, nlon)
          if (q(i, j, l) /= encode(l, si, sj)) bad = bad + 1
          if (l == 1 .and. c(i, j) /= real(encode(l, si, sj), real32)) bad = bad + 1
        end do
      end do
    end do
    call check(bad == 0, 'halo contents after start/finish')

    ! The adjoint identity <A x, y> = <x, A^T y> on q alone.
    call tessera_halo_clear_fields(halo)
    allocate(x, mold=q)
    allocate(y, mold=q)
    allocate(ax, mold=q)
    allocate(aty, mold=q)
    call random_seed(size=n)
    call random_number(x)
    call random_number(y)
    x = x + rank
    call tessera_halo_add_field(halo, q)
    q = x
    call tessera_halo_exchange(halo)
    ax = q
    q = y
    call tessera_halo_exchange_adjoint(halo)
    aty = q
    q = y
    call tessera_halo_start_adjoint(halo)
    call tessera_halo_finish_adjoint(halo)
    call check(all(q == aty), 'split adjoint equals the blocking one')
    sums = [sum(ax * y), sum(x * aty)]
    call MPI_Allreduce(sums, totals, 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(abs(totals(1) - totals(2)) <= 1e-12_real64 * (abs(totals(1)) + 1), 'adjoint identity')

    ! Scatter a global field into the interiors, gather it back.
    if (rank == 0) then
      allocate(g(nlon, nlat, nlev), gl(nlon, nlat, nlev))
      do l = 1, nlev
        do j = 1, nlat
          do i = 1, nlon
            g(i, j, l) = encode(l, j - 1, i - 1)
          end do
        end do
      end do
      gl = 0
    else
      allocate(g(0, 0, 0), gl(0, 0, 0))
    end if
    q = -7
    call tessera_halo_scatter(halo, g, q, 0)
    call check(all(q(1:nn, 1:nl, :) == reshape([(((encode(l, lat1 + j - 2, lon1 + i - 2), i = 1, nn), j = 1, nl), &
                                                  l = 1, nlev)], [nn, nl, nlev])), 'halo scatter')
    call check(q(0, 0, 1) == -7, 'scatter leaves the halo alone')
    call tessera_halo_gather(halo, q, gl, 0)
    if (rank == 0) call check(all(gl == g), 'halo gather')
    ! A contiguous section gathers, into a global array of its levels (on the root).
    gl = 0
    if (rank == 0) then
      call tessera_halo_gather(halo, q(:, :, 1:2), gl(:, :, 1:2), 0, status)
      call check(all(gl(:, :, 1:2) == g(:, :, 1:2)) .and. all(gl(:, :, 3:) == 0), 'a section gathered')
    else
      call tessera_halo_gather(halo, q(:, :, 1:2), gl, 0, status)
    end if
    call check(status == TESSERA_OK, 'a contiguous section gathers')
    call tessera_halo_gather(halo, q(:, :, 1:2), gl, 0, status)
    call check(status == TESSERA_ERR_SHAPE .and. index(tessera_last_error(), "tessera_halo_gather: gather: the " // &
               "global array's other dims (3) are not the field's (2)") > 0, &
               'a global array with other levels than the field''s: every rank fails')
    call tessera_halo_destroy(halo)
    call tessera_halo_exchange(halo, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'exchange on a destroyed handle')
    call tessera_decomp_destroy(decomp)
  end subroutine

  subroutine test_checkpoint()
    type(tessera_mesh) :: mesh
    type(tessera_decomp) :: decomp
    type(tessera_halo) :: halo
    type(tessera_checkpoint) :: ck
    real(real32), allocatable, target :: t(:, :), t2(:, :)
    real(real64), target :: params(4), params2(4), scalar, scalar2
    integer :: lat1, nl, lon1, nn, step, i, j
    character(len=:), allocatable :: meta

    call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)
    call tessera_decomp_create_from_mesh(decomp, mesh, nlat, nlon, 0, 0)
    call tessera_halo_create(halo, decomp, 2, 2, 1, 1, .true., TESSERA_POLE_ZERO)
    call tessera_decomp_box(decomp, lat1, nl, lon1, nn)
    allocate(t(-0:nn + 1, -1:nl + 2), t2(-0:nn + 1, -1:nl + 2))
    t = 0
    do j = 1, nl
      do i = 1, nn
        t(i, j) = real(encode(0, lat1 + j - 2, lon1 + i - 2), real32)
      end do
    end do
    params = [1.0_real64, 2.0_real64, 3.0_real64, 4.0_real64]
    scalar = 42.5_real64

    call tessera_checkpoint_begin_save(ck, mesh, trim(scratch) // '/ckpt', 3, TESSERA_LAYOUT_PER_RANK)
    call tessera_checkpoint_set_metadata(ck, 'fortran api test')
    call tessera_checkpoint_set_keep_last(ck, 2)
    call tessera_checkpoint_add_field(ck, 't', halo, t)
    call tessera_checkpoint_add_array(ck, 'params', params, [4], [0], '')
    call tessera_checkpoint_add_array(ck, 'scalar', scalar, [1], [0], 'dp: Replicate')
    call tessera_checkpoint_add_array(ck, 'bad', params, [4, 1], [0, 0], '', status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'global_shape with the wrong number of dims')
    call tessera_checkpoint_add_array(ck, 'bad', params, [3], [0], '', status)
    call check(status == TESSERA_ERR_SHAPE, 'block outside the global shape')
    call tessera_checkpoint_add_array(ck, 'bad', params(1:4:2), [2], [0], '', status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'non-contiguous array')
    call tessera_checkpoint_commit(ck)
    call tessera_checkpoint_step(ck, step)
    call check(step == 3, 'saved step')
    call tessera_checkpoint_destroy(ck)

    t2 = -1
    params2 = 0
    scalar2 = 0
    call tessera_checkpoint_begin_load(ck, mesh, trim(scratch) // '/ckpt')
    call tessera_checkpoint_add_field(ck, 't', halo, t2)
    call tessera_checkpoint_add_array(ck, 'params', params2, [4], [0], '')
    call tessera_checkpoint_add_array(ck, 'scalar', scalar2, [1], [0], '')
    call tessera_checkpoint_commit(ck)
    call tessera_checkpoint_step(ck, step)
    call tessera_checkpoint_metadata(ck, meta)
    call check(step == 3 .and. meta == 'fortran api test', 'loaded step and metadata')
    call check(all(t2(1:nn, 1:nl) == t(1:nn, 1:nl)), 'loaded field interior')
    call check(all(t2(0, :) == -1) .and. all(t2(:, -1) == -1), 'load leaves the halo alone')
    call check(all(params2 == params) .and. scalar2 == scalar, 'loaded arrays')
    call tessera_checkpoint_destroy(ck)

    ! A load whose global shape does not match the file fails on every rank.
    call tessera_checkpoint_begin_load(ck, mesh, trim(scratch) // '/ckpt')
    call tessera_checkpoint_set_strict(ck, .false.)
    call tessera_checkpoint_add_array(ck, 'params', params2(1:3), [3], [0], '')
    call tessera_checkpoint_commit(ck, status)
    call check(status == TESSERA_ERR_SHAPE, 'mismatched global shape on load')
    call tessera_checkpoint_destroy(ck)

    call tessera_halo_destroy(halo)
    call tessera_decomp_destroy(decomp)
    call tessera_mesh_destroy(mesh)
  end subroutine

end program test_fortran_api
