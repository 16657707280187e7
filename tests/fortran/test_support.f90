! What the Fortran tests share: the failure counter and the rank that reports it, and
! check(), which counts a failed condition and says on which rank, what, and tessera's
! last error (the context a failed call leaves). Each test sums failures over its
! communicator at the end and exits non-zero if any rank failed.
module tessera_test_support
  use, intrinsic :: iso_fortran_env, only: error_unit
  use tessera, only: tessera_last_error
  implicit none
  private
  public :: check

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
end module
