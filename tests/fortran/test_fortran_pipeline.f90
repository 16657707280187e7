! The pipeline mesh dimension from Fortran (docs/fortran.md, "Mesh"): for every layout
! (pipeline S, tensor T, domain D dividing the rank count) tessera_mesh_create_pipeline,
! with a type(MPI_Comm) and with an integer handle, gives along every dimension the
! rank, size and members of the C++ Mesh's layout (rank g: domain = g % D,
! tp = (g / D) % T, dp = (g / (T D)) % P, stage = g / (P T D)); pipeline 1 gives
! communicators congruent with tessera_mesh_create's; a pipeline of 0 is a config error.
program test_fortran_pipeline
  use mpi_f08
  use tessera
  use tessera_test_support
  implicit none
  type(tessera_mesh) :: mesh, old_mesh
  type(MPI_Comm) :: world, a, b
  integer :: nranks, total, status, s, t, d, data, dim, result, ra, rb, layouts

  call MPI_Init()
  world = MPI_COMM_WORLD
  call MPI_Comm_rank(world, rank)
  call MPI_Comm_size(world, nranks)
  layouts = 0

  do s = 1, nranks
    do t = 1, nranks
      do d = 1, nranks
        if (mod(nranks, s * t * d) /= 0) cycle
        data = TESSERA_DATA_NONE
        if (nranks / (s * t * d) > 1) data = TESSERA_DATA_DDP
        layouts = layouts + 1
        call tessera_mesh_create_pipeline(mesh, world, data, t, d, s, status)
        call check(status == TESSERA_OK, 'tessera_mesh_create_pipeline with type(MPI_Comm)')
        call expect_layout(mesh, s, t, d)
        call tessera_mesh_destroy(mesh)
        call tessera_mesh_create_pipeline(mesh, world%MPI_VAL, data, t, d, s, status)
        call check(status == TESSERA_OK, 'tessera_mesh_create_pipeline with an integer handle')
        call expect_layout(mesh, s, t, d)
        call tessera_mesh_destroy(mesh)
      end do
    end do
  end do

  ! Pipeline 1 is the mesh of tessera_mesh_create, communicator for communicator.
  do t = 1, nranks
    if (mod(nranks, t) /= 0) cycle
    data = TESSERA_DATA_NONE
    if (nranks / t > 1) data = TESSERA_DATA_DDP
    call tessera_mesh_create(old_mesh, world, data, t, 1, status)
    call check(status == TESSERA_OK, 'tessera_mesh_create')
    call tessera_mesh_create_pipeline(mesh, world, data, t, 1, 1, status)
    call check(status == TESSERA_OK, 'tessera_mesh_create_pipeline at pipeline 1')
    do dim = 0, TESSERA_MESH_PIPELINE
      call tessera_mesh_comm(old_mesh, dim, a)
      call tessera_mesh_comm(mesh, dim, b)
      call MPI_Comm_compare(a, b, result)
      call check(result == MPI_CONGRUENT, 'pipeline 1: a communicator congruent with tessera_mesh_create''s')
      call tessera_mesh_rank(old_mesh, dim, ra)
      call tessera_mesh_rank(mesh, dim, rb)
      call check(ra == rb, 'pipeline 1: the same rank as tessera_mesh_create''s')
    end do
    call tessera_mesh_size(old_mesh, TESSERA_MESH_PIPELINE, ra)
    call check(ra == 1, 'a mesh without a pipeline has a pipeline group of 1')
    call tessera_mesh_destroy(old_mesh)
    call tessera_mesh_destroy(mesh)
  end do

  call tessera_mesh_create_pipeline(mesh, world, TESSERA_DATA_DDP, 1, 1, 0, status)
  call check(status == TESSERA_ERR_CONFIG, 'pipeline 0 is a config error')
  call check(index(tessera_last_error(), 'pipeline') > 0, 'the error names the pipeline')

  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, world)
  if (rank == 0) print '(a,i0,a,i0,a,i0,a)', 'test_fortran_pipeline: ', nranks, ' ranks, ', layouts, &
    ' layouts, ', total, ' failed checks'
  call MPI_Finalize()
  if (total /= 0) error stop 1

contains

  ! Every dimension's rank, size and members (world ranks in group order) against the layout formula.
  subroutine expect_layout(mesh, s, t, d)
    type(tessera_mesh), intent(in) :: mesh
    integer, intent(in) :: s, t, d
    integer :: p, c(0:3), extent(0:3), dims(0:3), k, i, r, n, status
    integer, allocatable :: got(:), want(:)
    type(MPI_Comm) :: comm
    p = nranks / (s * t * d)
    ! Coordinates in the order of TESSERA_MESH_DP, _TP, _DOMAIN and the pipeline.
    c(2) = mod(rank, d)
    c(1) = mod(rank / d, t)
    c(0) = mod(rank / (t * d), p)
    c(3) = rank / (p * t * d)
    extent = [p, t, d, s]
    dims = [TESSERA_MESH_DP, TESSERA_MESH_TP, TESSERA_MESH_DOMAIN, TESSERA_MESH_PIPELINE]
    do k = 0, 3
      call tessera_mesh_rank(mesh, dims(k), r, status)
      call check(status == TESSERA_OK .and. r == c(k), 'the rank along a dimension')
      call tessera_mesh_size(mesh, dims(k), n, status)
      call check(status == TESSERA_OK .and. n == extent(k), 'the size of a dimension')
      call tessera_mesh_comm(mesh, dims(k), comm, status)
      call check(status == TESSERA_OK, 'tessera_mesh_comm')
      if (status /= TESSERA_OK) cycle
      call MPI_Comm_size(comm, n)
      allocate(got(n), want(extent(k)))
      call MPI_Allgather(rank, 1, MPI_INTEGER, got, 1, MPI_INTEGER, comm)
      do i = 0, extent(k) - 1
        want(i + 1) = global_rank(c, k, i, t, d, p)
      end do
      call check(size(got) == size(want), 'the group size')
      if (size(got) == size(want)) call check(all(got == want), 'the group members, in coordinate order')
      deallocate(got, want)
    end do
  end subroutine

  ! The world rank with coordinate k of `c` replaced by i.
  integer function global_rank(c, k, i, t, d, p)
    integer, intent(in) :: c(0:3), k, i, t, d, p
    integer :: e(0:3)
    e = c
    e(k) = i
    global_rank = ((e(3) * p + e(0)) * t + e(1)) * d + e(2)
  end function
end program
