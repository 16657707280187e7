! docs/fortran.md, "Bring your own array layout": a model state held as levels-first
! arrays in a derived type, q(k, i, j) = (lev, lon, lat), with a halo 2 cells wide in
! longitude and 1 in latitude, exchanged and written to a restart as it is.
program doc_layout
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real64
  implicit none
  integer, parameter :: nlat = 16, nlon = 32, nlev = 4
  type :: state_t
    real(real64), allocatable :: q(:, :, :)      ! q(k, i, j): levels fastest
  end type
  type(state_t), target :: state
  type(tessera_mesh) :: mesh
  type(tessera_decomp) :: decomp
  type(tessera_halo) :: halo
  type(tessera_checkpoint) :: ckpt
  integer :: ierr, nranks, rank, first(2), count(2), nlat_loc, nlon_loc, i, j

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, nranks)
  call tessera_decomp_create_from_mesh(decomp, mesh, [nlon, nlat], [0, 0])   ! lon first; latitude bands
  call tessera_decomp_box(decomp, first, count)                              ! [lon, lat]
  nlon_loc = count(1); nlat_loc = count(2)
  ! layout: begin
  call tessera_halo_create(halo, decomp, [2, 1], [2, 1], .true., TESSERA_POLE_REPLICATE)   ! [lon, lat] widths
  allocate(state%q(nlev, -1:nlon_loc+2, 0:nlat_loc+1))            ! (lev, lon, lat) + halo
  call tessera_halo_add_field(halo, state%q, lon_dim=2, lat_dim=3)
  ! layout: end
  state%q = 0
  do j = 1, nlat_loc
    do i = 1, nlon_loc
      state%q(:, i, j) = first(2) + j - 1                          ! the 1-based global row
    end do
  end do
  call tessera_halo_exchange(halo)
  ! restart: begin
  call tessera_checkpoint_begin_save(ckpt, mesh, 'layout_restart', 1, TESSERA_LAYOUT_SHARED)
  call tessera_checkpoint_add_field(ckpt, 'q', halo, state%q, lon_dim=2, lat_dim=3)
  call tessera_checkpoint_commit(ckpt)                             ! file: q(lev, lat, lon) in C order
  ! restart: end
  call tessera_checkpoint_destroy(ckpt)
  if (rank == 0) print '(a,i0,a,i0,a,i0)', 'rank 0: rows ', nint(state%q(1, 1, 1)), '..', &
                       nint(state%q(1, 1, nlat_loc)), ', halo row below ', nint(state%q(nlev, -1, nlat_loc + 1))
  call tessera_halo_destroy(halo)
  call tessera_decomp_destroy(decomp)
  call tessera_mesh_destroy(mesh)
  call MPI_Finalize(ierr)
end program
