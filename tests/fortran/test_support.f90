! What the Fortran tests share: the failure counter and the rank that reports it, and
! check(), which counts a failed condition and says on which rank, what, and tessera's
! last error (the context a failed call leaves); the start and the end of a test on
! MPI_COMM_WORLD (start_test, finish_test: failures summed over the ranks, reported once,
! a non-zero exit status if any rank failed) and its scratch directory per rank count;
! itoa, an integer as the text a message gives it.
module tessera_test_support
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi
  use tessera, only: tessera_last_error
  implicit none
  private
  public :: check, start_test, scratch_directory, finish_test, itoa

  ! The test program sets rank (MPI_Comm_rank writes it directly) and reduces failures.
  integer, public :: rank = 0, failures = 0

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      write(error_unit, '(a,i0,a,a,a,a)') '[rank ', rank, '] check failed: ', what, '; last error: ', &
        tessera_last_error()
    end if
  end subroutine

  function itoa(n) result(s)
    integer, intent(in) :: n
    character(len=:), allocatable :: s
    character(len=16) :: b
    write(b, '(i0)') n
    s = trim(b)
  end function

  ! MPI_Init; rank and nranks in MPI_COMM_WORLD.
  subroutine start_test(nranks)
    integer, intent(out) :: nranks
    integer :: ierr
    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  end subroutine

  ! The directory of this run's files: the first command-line argument (default '.') and
  ! '/<prefix>_np<nranks>', one per rank count since the runs at several counts may overlap.
  function scratch_directory(prefix, nranks) result(dir)
    character(len=*), intent(in) :: prefix
    integer, intent(in) :: nranks
    character(len=256) :: dir, base
    if (command_argument_count() >= 1) then
      call get_command_argument(1, base)
    else
      base = '.'
    end if
    write(dir, '(a,a,a,a,i0)') trim(base), '/', prefix, '_np', nranks
  end function

  ! The failed checks summed over MPI_COMM_WORLD, reported by rank 0 as
  ! '<program>: <n> ranks, <k> failed checks'; MPI_Finalize; exit status 1 if any failed.
  subroutine finish_test(program, nranks)
    character(len=*), intent(in) :: program
    integer, intent(in) :: nranks
    integer :: total, ierr
    call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0) print '(a,a,i0,a,i0,a)', program, ': ', nranks, ' ranks, ', total, ' failed checks'
    call MPI_Finalize(ierr)
    if (total /= 0) error stop 1
  end subroutine
end module
