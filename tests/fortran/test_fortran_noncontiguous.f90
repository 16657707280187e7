! Non-contiguous actual arguments where tessera keeps the address after the call (halo
! field registration, checkpoint arrays). gfortran passes a component of an array of
! derived type (pts%u), or a pointer to one, to an ordinary assumed-rank dummy as a
! contiguous temporary that dies on return: tessera used to register the temporary's
! address with TESSERA_OK, and the exchange then never filled the caller's halos.
! Checked here, at 1 and 2 ranks:
!  - pts%u (real32), pts%v (real64), a pointer to pts%u and a strided section a(:, ::2),
!    all with the padded extents, are TESSERA_ERR_INVALID_ARGUMENT with the documented
!    message (docs/fortran.md) naming the argument, and register nothing; the same for
!    tessera_checkpoint_add_array / _add_field; pts is intact afterwards;
!  - contiguous fields (a whole array, a contiguous section of a rank-3 array, the
!    allocatable component of a derived-type scalar) still register and get their halos
!    filled;
!  - a field rejected on rank 0 only, after the first exchange, makes the next exchange
!    fail on every rank with the same status instead of hanging, and the handle stays
!    usable; so does a strided array given to tessera_decomp_scatter / _gather on rank 0
!    only.
! Exit status 1 on any failure.
program test_fortran_noncontiguous
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64
  implicit none

  ! Several components of different kinds: pts%u is a real32 array whose elements are
  ! storage_size(point) apart, pts%v the same for real64.
  type :: point
    real(real32) :: u
    real(real64) :: v
    integer :: k
    real(real32) :: w
  end type

  type :: state
    integer :: step
    real(real64), allocatable :: h(:, :)
  end type

  integer, parameter :: nlat = 12, nlon = 8
  character(len=*), parameter :: not_contiguous = "is not contiguous (a strided section, or a component of an " // &
    "array of derived type such as pts%u); pass a whole array or a contiguous section"
  integer :: nranks
  character(len=256) :: scratch

  call start_test(nranks)
  scratch = scratch_directory('fortran_noncontiguous', nranks)

  call test_halo()
  call test_checkpoint()

  call finish_test('test_fortran_noncontiguous', nranks)

contains

  real(real64) function encode(i, j)
    integer, intent(in) :: i, j
    encode = 100.0_real64 * i + j + 1.0_real64
  end function

  ! The number of cells of q(0:, 0:) (interior and halo) that differ from the exchanged
  ! value: a periodic longitude and replicated edge rows beyond the poles.
  integer function wrong_cells(q, lat1, lon1) result(bad)
    real(real64), intent(in) :: q(0:, 0:)
    integer, intent(in) :: lat1, lon1
    integer :: i, j, si, sj
    bad = 0
    do j = 0, ubound(q, 2)
      do i = 0, ubound(q, 1)
        si = min(max(lat1 + j - 2, 0), nlat - 1)
        sj = modulo(lon1 + i - 2, nlon)
        if (q(i, j) /= encode(si, sj)) bad = bad + 1
      end do
    end do
  end function

  ! One rejected registration: the status, the exact message, and nothing registered.
  subroutine expect_rejected(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, what // ': status TESSERA_ERR_INVALID_ARGUMENT')
    call check(tessera_last_error() == "tessera_halo_add_field: argument 'field' " // not_contiguous, &
               what // ': the message names the argument and the reason')
  end subroutine

  subroutine test_halo()
    type(tessera_decomp) :: decomp
    type(tessera_halo) :: halo
    type(point), allocatable, target :: pts(:, :)
    real(real32), allocatable, target :: a(:, :), c3(:, :, :)
    real(real32), pointer :: pu(:, :)
    real(real64), allocatable, target :: q(:, :), q2(:, :), box(:, :), whole(:, :), strided(:, :)
    type(state), target :: st
    integer :: lat1, nl, lon1, nn, plat, plon, i, j, n, status

    call tessera_decomp_create(decomp, MPI_COMM_WORLD, nlat, nlon, 0, 0)
    call tessera_halo_create(halo, decomp, 1, 1, 1, 1, .true., TESSERA_POLE_REPLICATE)
    call tessera_decomp_box(decomp, lat1, nl, lon1, nn)
    call tessera_halo_padded(halo, plat, plon)

    ! Every rejected actual has the padded extents, so only its layout is wrong.
    allocate(pts(0:nn + 1, 0:nl + 1), a(plon, 2 * plat))
    pts%u = -7; pts%v = -7; pts%k = 0; pts%w = -7; a = -7
    call tessera_halo_add_field(halo, pts%u, status)
    call expect_rejected(status, 'pts%u (real32 component)')
    call tessera_halo_add_field(halo, pts%v, status)
    call expect_rejected(status, 'pts%v (real64 component)')
    pu => pts%u
    call tessera_halo_add_field(halo, pu, status)
    call expect_rejected(status, 'a pointer to pts%u')
    call tessera_halo_add_field(halo, a(:, ::2), status)
    call expect_rejected(status, 'a(:, ::2) (strided section)')
    call tessera_halo_num_fields(halo, n)
    call check(n == 0, 'rejected fields register nothing')
    call check(all(lbound(pts) == 0) .and. all(ubound(pts) == [nn + 1, nl + 1]) .and. all(pts%u == -7) .and. &
               all(pts%v == -7) .and. all(pts%k == 0) .and. all(pts%w == -7), 'pts intact after the rejections')

    ! Contiguous fields: a whole real64 array, the contiguous section c3(:, :, 2) of a
    ! real32 array, and the allocatable component st%h of a derived-type scalar; their
    ! halos are filled.
    allocate(q(0:nn + 1, 0:nl + 1), c3(0:nn + 1, 0:nl + 1, 3), st%h(0:nn + 1, 0:nl + 1))
    q = -7; c3 = -7
    do j = 1, nl
      do i = 1, nn
        q(i, j) = encode(lat1 + j - 2, lon1 + i - 2)
      end do
    end do
    c3(:, :, 2) = real(q, real32)
    st%h = q
    call tessera_halo_add_field(halo, q, status)
    call check(status == TESSERA_OK, 'a whole array registers')
    call tessera_halo_add_field(halo, c3(:, :, 2), status)
    call check(status == TESSERA_OK, 'a contiguous section registers')
    call tessera_halo_add_field(halo, st%h, status)
    call check(status == TESSERA_OK, 'a contiguous component registers')
    call tessera_halo_num_fields(halo, n)
    call check(n == 3, 'three fields registered')
    call tessera_halo_exchange(halo, status)
    call check(status == TESSERA_OK, 'exchange')
    call check(wrong_cells(q, lat1, lon1) == 0, 'halo of the whole array filled')
    call check(wrong_cells(real(c3(:, :, 2), real64), lat1, lon1) == 0, 'halo of the contiguous section filled')
    call check(wrong_cells(st%h, lat1, lon1) == 0, 'halo of the contiguous component filled')
    call check(all(c3(:, :, 1) == -7) .and. all(c3(:, :, 3) == -7), 'the rest of the rank-3 array untouched')

    ! After that first exchange, rank 0's next registration is rejected while the other
    ! ranks' succeeds: the next exchange fails on every rank (no hang), naming the counts.
    if (nranks > 1) then
      allocate(q2, mold=q)
      q2 = 0
      if (rank == 0) then
        call tessera_halo_add_field(halo, pts%v, status)
        call expect_rejected(status, 'pts%v on rank 0 only')
      else
        call tessera_halo_add_field(halo, q2, status)
        call check(status == TESSERA_OK, 'the other ranks register a second field')
      end if
      call tessera_halo_exchange(halo, status)
      call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'exchange after a rank-0-only rejection fails everywhere')
      call check(index(tessera_last_error(), 'rank 0 registered 3 field(s)') > 0, &
                 'the exchange names the differing field counts')
      ! Registering the same fields everywhere makes the handle usable again.
      call tessera_halo_clear_fields(halo)
      call tessera_halo_add_field(halo, q)
      q(0, :) = -7; q(:, 0) = -7
      call tessera_halo_exchange(halo, status)
      call check(status == TESSERA_OK, 'exchange after registering alike again')
      call check(wrong_cells(q, lat1, lon1) == 0, 'halo filled after registering alike again')
    end if

    ! The decomposition's scatter and gather with a strided section (box-shaped) as the
    ! local array on rank 0 only (pts%v would reach them as the compiler's contiguous
    ! copy, which is correct for a call that uses the array only while it runs): every
    ! rank fails with the same status (the others used to wait in the collective for
    ! rank 0, which had returned), rank 0 with its own message; then both work again.
    if (nranks > 1) then
      allocate(box(nn, nl), whole(nlon, nlat), strided(nn, 2 * nl))
      whole = 3; box = 0; strided = 0
      if (rank == 0) then
        call tessera_decomp_scatter(decomp, whole, strided(:, ::2), 0, status)
        call check(tessera_last_error() == "tessera_decomp_scatter: argument 'local' " // not_contiguous, &
                   'scatter: rank 0 keeps its own message')
      else
        call tessera_decomp_scatter(decomp, whole, box, 0, status)
      end if
      call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'scatter with a strided local on rank 0 fails everywhere')
      if (rank == 0) then
        call tessera_decomp_gather(decomp, strided(:, ::2), whole, 0, status)
        call check(tessera_last_error() == "tessera_decomp_gather: argument 'local' " // not_contiguous, &
                   'gather: rank 0 keeps its own message')
      else
        call tessera_decomp_gather(decomp, box, whole, 0, status)
      end if
      call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'gather with a strided local on rank 0 fails everywhere')
      call tessera_decomp_scatter(decomp, whole, box, 0, status)
      call check(status == TESSERA_OK .and. all(box == 3), 'scatter works again')
    end if

    call tessera_halo_destroy(halo)
    call tessera_decomp_destroy(decomp)
  end subroutine

  ! Checkpoint arrays are used by address at commit: the same actuals are rejected.
  subroutine test_checkpoint()
    type(tessera_mesh) :: mesh
    type(tessera_decomp) :: decomp
    type(tessera_halo) :: halo
    type(tessera_checkpoint) :: ck
    type(point), allocatable, target :: pts(:, :)
    real(real64), target :: params(6)
    integer :: lat1, nl, lon1, nn, status

    call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)
    call tessera_decomp_create_from_mesh(decomp, mesh, nlat, nlon, 0, 0)
    call tessera_halo_create(halo, decomp, 1, 1, 1, 1, .true., TESSERA_POLE_ZERO)
    call tessera_decomp_box(decomp, lat1, nl, lon1, nn)
    allocate(pts(0:nn + 1, 0:nl + 1))
    pts%u = 1; pts%v = 2; pts%k = 3; pts%w = 4
    params = 5

    call tessera_checkpoint_begin_save(ck, mesh, trim(scratch) // '/ckpt', 1, TESSERA_LAYOUT_SHARED)
    call tessera_checkpoint_add_field(ck, 'u', halo, pts%u, status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'checkpoint_add_field of pts%u')
    call check(tessera_last_error() == "tessera_checkpoint_add_field: field 'u': argument 'field' " // not_contiguous, &
               'checkpoint_add_field message')
    call tessera_checkpoint_add_array(ck, 'v', pts%v, [nn + 2, nl + 2], [0, 0], '', status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'checkpoint_add_array of pts%v')
    call check(tessera_last_error() == "tessera_checkpoint_add_array: array 'v': argument 'array' " // not_contiguous, &
               'checkpoint_add_array message')
    call tessera_checkpoint_add_array(ck, 'p', params(::2), [3], [0], '', status)
    call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'checkpoint_add_array of params(::2)')
    call tessera_checkpoint_add_array(ck, 'p', params(2:4), [3], [0], '', status)
    call check(status == TESSERA_OK, 'checkpoint_add_array of a contiguous section')
    call tessera_checkpoint_destroy(ck)

    call tessera_halo_destroy(halo)
    call tessera_decomp_destroy(decomp)
    call tessera_mesh_destroy(mesh)
  end subroutine

end program test_fortran_noncontiguous
