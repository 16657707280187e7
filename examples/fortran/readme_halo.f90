program readme_halo
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real64
  implicit none
  type(tessera_mesh) :: mesh
  type(tessera_decomp) :: decomp
  type(tessera_halo) :: halo
  real(real64), allocatable, target :: q(:, :)
  integer :: ierr, nranks, rank, first(2), n(2), j

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)   ! domain = all ranks
  call tessera_decomp_create_from_mesh(decomp, mesh, [32, 16], [0, 0])          ! [lon, lat]; latitude bands
  call tessera_halo_create(halo, decomp, [1, 1], [1, 1], .true., TESSERA_POLE_REPLICATE)
  call tessera_decomp_box(decomp, first, n)                                     ! [lon, lat], 1-based first
  allocate(q(0:n(1)+1, 0:n(2)+1), source=0.0_real64)                           ! q(lon, lat), halo frame
  do j = 1, n(2)
    q(1:n(1), j) = first(2) + j - 2                                             ! 0-based global latitude
  end do
  call tessera_halo_add_field(halo, q)
  call tessera_halo_exchange(halo)                                              ! collective
  print '(5(a,i0))', 'rank ', rank, ': rows ', nint(q(1, 1)), '..', nint(q(1, n(2))), &
        ', halo rows ', nint(q(1, 0)), ' and ', nint(q(1, n(2) + 1))
  call tessera_halo_destroy(halo)
  call tessera_decomp_destroy(decomp)
  call tessera_mesh_destroy(mesh)
  call MPI_Finalize(ierr)
end program
