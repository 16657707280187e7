! A Fortran code against the installed tessera, built the Makefile way (mpif90
! $(pkg-config --cflags --libs tessera-fortran)) and by a CMake project with LANGUAGES
! Fortran (consumer_fortran/). The same global sum of ones as the C consumer.
program pkgconfig_consumer
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real64
  implicit none
  integer :: ierr, rank, nranks, glat, glon, lat_first, lat_count, lon_first, lon_count
  type(tessera_decomp) :: d
  real(real64), allocatable :: q(:, :)
  real(real64) :: total
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call tessera_decomp_auto_grid(nranks, 6, 8, glat, glon)
  call tessera_decomp_create(d, MPI_COMM_WORLD, 6, 8, glat, glon)
  call tessera_decomp_box(d, lat_first, lat_count, lon_first, lon_count)
  allocate(q(lon_count, lat_count))
  q = 1.0_real64
  call tessera_decomp_global_sum(d, q, total)
  if (rank == 0) print '(a,i0,a,f0.0)', 'Fortran consumer: ', nranks, ' ranks, sum ', total
  call tessera_decomp_destroy(d)
  call MPI_Finalize(ierr)
end program
