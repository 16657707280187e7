! tessera: the Fortran interface to tessera's C API (include/tessera/tessera.h).
!
! An existing MPI Fortran code keeps its communicator and its arrays; tessera plans the
! decomposition, fills halos of the caller's arrays in place, writes and reads restarts
! as tessera checkpoints, and runs a trained model (tessera_model: loaded from a
! checkpoint, forward on the caller's fields). See docs/fortran.md.
!
! Conventions
!  - Handles (tessera_mesh, tessera_decomp, tessera_halo, tessera_checkpoint,
!    tessera_model, tessera_redist, tessera_stats) wrap a C
!    pointer; *_destroy frees one and nullifies it.
!  - Every procedure takes an optional trailing `ierr`. When present it receives the
!    status (TESSERA_OK = 0, or a TESSERA_ERR_* code) and the caller decides what to do
!    (tessera_last_error() holds the message). When absent and the call fails, the
!    message is written to error_unit and the program is stopped with
!    MPI_Abort(MPI_COMM_WORLD, status): a failed collective has failed on every rank,
!    and a local failure must not leave the other ranks waiting.
!  - Communicators are Fortran integer handles (MPI_COMM_WORLD, or your own).
!  - Arrays are real32 or real64 of any rank, contiguous (whole arrays or contiguous
!    sections), described in Fortran order: a field is q(lon, lat[, levels...]), the
!    reverse of tessera's C-order (levels..., lat, lon). Arrays registered with a halo or
!    added to a checkpoint are used by address after the call returns: give them the
!    TARGET attribute and keep them allocated while registered (halo) or until commit.
!    Those procedures take the array as an INTENT(IN) POINTER, so the actual must have
!    TARGET (or be a pointer): that way a non-contiguous actual such as pts%u reaches
!    them as itself and is rejected, instead of as a compiler temporary that dies on
!    return (see "Procedures that keep the array's address" below).
!  - Ranks and offsets are 0-based like MPI's; boxes are 1-based first indices.
!  - Lon first: arguments that name lon and lat are [lon, lat] rank-1 arrays (global
!    grid, process grid, halo widths, boxes, padded extents); the latitude-first scalar
!    forms of the first releases are kept, deprecated (docs/fortran.md).
!  - Strings are passed to C trimmed and NUL-terminated.
module tessera
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64, error_unit
#ifdef TESSERA_HAVE_MPI_F08
  ! Only the handle type: every procedure that takes or returns a communicator has a
  ! type(MPI_Comm) form beside the integer one (the generic interfaces below).
  use mpi_f08, only: MPI_Comm
#endif
  implicit none
  private

  ! Status codes (tessera_status_t).
  integer, parameter, public :: TESSERA_OK = 0, TESSERA_ERR_INVALID_ARGUMENT = 1, &
    TESSERA_ERR_CONFIG = 2, TESSERA_ERR_SHAPE = 3, TESSERA_ERR_UNSUPPORTED = 4, &
    TESSERA_ERR_MPI = 5, TESSERA_ERR_HDF5 = 6, TESSERA_ERR_CUDA = 7, TESSERA_ERR_NCCL = 8, &
    TESSERA_ERR_CUBLAS = 9, TESSERA_ERR_IO = 10, TESSERA_ERR_INTERNAL = 11
  integer(c_int), parameter :: TESSERA_F32 = 0, TESSERA_F64 = 1, TESSERA_ORDER_FORTRAN = 1
  integer, parameter, public :: TESSERA_DATA_NONE = 0, TESSERA_DATA_DDP = 1, TESSERA_DATA_FSDP2 = 2
  integer, parameter, public :: TESSERA_MODEL_FIELD_EMULATOR = 0, TESSERA_MODEL_DECODER = 1, TESSERA_MODEL_ONNX = 2
  ! tessera_model_onnx_train_step's optimizer.
  integer, parameter, public :: TESSERA_OPTIMIZER_SGD = 0, TESSERA_OPTIMIZER_ADAMW = 1
  integer, parameter, public :: TESSERA_MESH_DP = 0, TESSERA_MESH_TP = 1, TESSERA_MESH_DOMAIN = 2, &
    TESSERA_MESH_WORLD = 3
  integer, parameter, public :: TESSERA_POLE_ZERO = 0, TESSERA_POLE_REPLICATE = 1, &
    TESSERA_POLE_ACROSS_POLE = 2, TESSERA_POLE_ACROSS_POLE_POINT = 3
  integer, parameter, public :: TESSERA_LAYOUT_SHARED = 0, TESSERA_LAYOUT_PER_RANK = 1
  ! What fills the halo beyond one edge (tessera_edge_t, tessera_halo_create_edges). North
  ! is the side of latitude row 1 (j = 1), west the side of longitude column 1 (i = 1).
  integer, parameter, public :: TESSERA_EDGE_POLE = 0, TESSERA_EDGE_PERIODIC = 1, TESSERA_EDGE_ZERO = 2, &
    TESSERA_EDGE_NONE = 3, TESSERA_EDGE_REPLICATE = 4, TESSERA_EDGE_MIRROR_EVEN = 5, TESSERA_EDGE_MIRROR_ODD = 6
  ! How an uneven split places its remainder (tessera_split_t) and the dimension order of
  ! a 2-D Cartesian communicator (tessera_cart_order_t): a Fortran code's
  ! MPI_Cart_create(comm, 2, [plon, plat], ...) is TESSERA_CART_LON_LAT.
  integer, parameter, public :: TESSERA_SPLIT_FIRST_RANKS = 0, TESSERA_SPLIT_LAST_RANK = 1
  integer, parameter, public :: TESSERA_CART_LAT_LON = 0, TESSERA_CART_LON_LAT = 1
  integer, parameter :: MAX_DIMS = 8

  type, public :: tessera_mesh
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, public :: tessera_decomp
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, public :: tessera_halo
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, public :: tessera_checkpoint
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, public :: tessera_model
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, public :: tessera_redist
    type(c_ptr) :: ptr = c_null_ptr
  end type
  ! Normalisation statistics of the code's fields over a decomposition (tessera_stats_*):
  ! the handle and the channel count it was created with (the length of mean and std).
  type, public :: tessera_stats
    type(c_ptr) :: ptr = c_null_ptr
    integer :: channels = 0
  end type

  public :: tessera_error_string, tessera_last_error, tessera_version
  public :: tessera_mesh_create, tessera_mesh_create_from_file, tessera_mesh_destroy, &
    tessera_mesh_config, tessera_mesh_rank, tessera_mesh_size, tessera_mesh_comm
  public :: tessera_decomp_create, tessera_decomp_create_from_mesh, tessera_decomp_destroy, &
    tessera_decomp_rank, tessera_decomp_size, tessera_decomp_global, tessera_decomp_grid, &
    tessera_decomp_coords, tessera_decomp_box, tessera_decomp_box_of, tessera_decomp_comm, &
    tessera_decomp_scatter, tessera_decomp_gather, tessera_decomp_global_sum, tessera_decomp_auto_grid, &
    tessera_decomp_create_cart, tessera_decomp_create_boxes, tessera_decomp_create_split, &
    tessera_decomp_check_box, tessera_decomp_periodic
  public :: tessera_stats_create, tessera_stats_add, tessera_stats_finish, tessera_stats_destroy
  public :: tessera_halo_create, tessera_halo_create_edges, tessera_halo_destroy, tessera_halo_padded, tessera_halo_add_field, &
    tessera_halo_clear_fields, tessera_halo_num_fields, tessera_halo_exchange, tessera_halo_start, &
    tessera_halo_finish, tessera_halo_exchange_adjoint, tessera_halo_start_adjoint, &
    tessera_halo_finish_adjoint, tessera_halo_in_flight, tessera_halo_gather, tessera_halo_scatter
  public :: tessera_checkpoint_begin_save, tessera_checkpoint_begin_load, &
    tessera_checkpoint_set_metadata, tessera_checkpoint_set_keep_last, tessera_checkpoint_set_strict, &
    tessera_checkpoint_add_array, tessera_checkpoint_add_field, tessera_checkpoint_commit, &
    tessera_checkpoint_step, tessera_checkpoint_metadata, tessera_checkpoint_destroy
  public :: tessera_model_load, tessera_model_destroy, tessera_model_info, tessera_model_box, &
    tessera_model_predict, tessera_model_forward, tessera_model_type, tessera_model_vocab, tessera_model_logits, &
    tessera_model_load_onnx, tessera_model_split_onnx, tessera_model_run, tessera_model_onnx_train_step, &
    tessera_model_save_onnx
  public :: tessera_redist_create, tessera_redist_destroy, tessera_redist_model_size, tessera_redist_model_rank, &
    tessera_redist_model_box, tessera_redist_model_comm, tessera_redist_add_field, tessera_redist_clear_fields, &
    tessera_redist_num_fields, tessera_redist_to_model, tessera_redist_to_code, tessera_redist_start_to_model, &
    tessera_redist_start_to_code, tessera_redist_finish, tessera_redist_in_flight, tessera_model_load_coupled, &
    tessera_model_coupling, tessera_model_train_step

  ! Communicators as integer handles (use mpi) or as type(MPI_Comm) (use mpi_f08).
  interface tessera_mesh_create
    module procedure mesh_create_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure mesh_create_f08
#endif
  end interface
  interface tessera_mesh_create_from_file
    module procedure mesh_create_from_file_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure mesh_create_from_file_f08
#endif
  end interface
  interface tessera_mesh_comm
    module procedure mesh_comm_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure mesh_comm_f08
#endif
  end interface
  ! Every procedure whose integer arguments name lon and lat has a lon-first form taking
  ! [lon, lat] rank-1 arrays (global = [nlon, nlat], procs = [plon, plat], first/count,
  ! before/after widths, ...) beside the original latitude-first scalars, which are kept,
  ! deprecated, so existing positional calls keep their meaning. The generic tells them
  ! apart by the number of scalar integer arguments (unambiguous by the standard's rule,
  ! positional or keyword), and both reach the same C entry point.
  interface tessera_decomp_create
    module procedure decomp_create_int, decomp_create_lon_lat_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure decomp_create_f08, decomp_create_lon_lat_f08
#endif
  end interface
  ! The code's own decomposition (docs/fortran.md, "Bring your decomposition"), lon first.
  interface tessera_decomp_create_cart
    module procedure decomp_create_cart_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure decomp_create_cart_f08
#endif
  end interface
  interface tessera_decomp_create_boxes
    module procedure decomp_create_boxes_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure decomp_create_boxes_f08
#endif
  end interface
  interface tessera_decomp_create_split
    module procedure decomp_create_split_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure decomp_create_split_f08
#endif
  end interface
  interface tessera_decomp_create_from_mesh
    module procedure decomp_create_from_mesh_lat_lon, decomp_create_from_mesh_lon_lat
  end interface
  interface tessera_decomp_global
    module procedure decomp_global_lat_lon, decomp_global_lon_lat
  end interface
  interface tessera_decomp_grid
    module procedure decomp_grid_lat_lon, decomp_grid_lon_lat
  end interface
  interface tessera_decomp_coords
    module procedure decomp_coords_lat_lon, decomp_coords_lon_lat
  end interface
  interface tessera_decomp_box_of
    module procedure decomp_box_of_lat_lon, decomp_box_of_lon_lat
  end interface
  interface tessera_decomp_auto_grid
    module procedure decomp_auto_grid_lat_lon, decomp_auto_grid_lon_lat
  end interface
  interface tessera_halo_create
    module procedure halo_create_lat_lon, halo_create_lon_lat
  end interface
  interface tessera_model_info
    module procedure model_info_lat_lon, model_info_lon_lat
  end interface
  interface tessera_model_box
    module procedure model_box_lat_lon, model_box_lon_lat
  end interface
  interface tessera_redist_model_box
    module procedure redist_model_box_lat_lon, redist_model_box_lon_lat
  end interface
  interface tessera_decomp_comm
    module procedure decomp_comm_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure decomp_comm_f08
#endif
  end interface
  interface tessera_decomp_scatter
    module procedure decomp_scatter_r32, decomp_scatter_r64
  end interface
  interface tessera_decomp_gather
    module procedure decomp_gather_r32, decomp_gather_r64
  end interface
  interface tessera_decomp_global_sum
    module procedure decomp_global_sum_r32, decomp_global_sum_r64
  end interface
  interface tessera_stats_add
    module procedure stats_add_r32, stats_add_r64
  end interface
  interface tessera_model_run
    module procedure model_run_r32, model_run_r64
  end interface
  interface tessera_model_onnx_train_step
    module procedure model_onnx_train_step_r32, model_onnx_train_step_r64
  end interface
  interface tessera_decomp_box
    module procedure decomp_box_lat_lon, decomp_box_lon_lat
  end interface
  interface tessera_halo_padded
    module procedure halo_padded_lat_lon, halo_padded_lon_lat
  end interface
  interface tessera_halo_add_field
    module procedure halo_add_field_r32, halo_add_field_r64
  end interface
  interface tessera_halo_gather
    module procedure halo_gather_r32, halo_gather_r64
  end interface
  interface tessera_halo_scatter
    module procedure halo_scatter_r32, halo_scatter_r64
  end interface
  interface tessera_checkpoint_add_array
    module procedure checkpoint_add_array_r32, checkpoint_add_array_r64
  end interface
  interface tessera_checkpoint_add_field
    module procedure checkpoint_add_field_r32, checkpoint_add_field_r64
  end interface
  interface tessera_redist_add_field
    module procedure redist_add_field_r32, redist_add_field_r64
  end interface
  interface tessera_redist_model_comm
    module procedure redist_model_comm_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure redist_model_comm_f08
#endif
  end interface

  ! A failure found on the Fortran side (a non-contiguous array) has no C message; it is
  ! kept here and returned by tessera_last_error() until the next call.
  character(len=:), allocatable :: local_message

#include "tessera_c_interfaces.inc"
#include "tessera_coupling_interfaces.inc"
#include "tessera_stagger_spec.inc"
#include "tessera_pipeline_spec.inc"
#include "tessera_trainer_spec.inc"

contains

  ! ---------------------------------------------------------------------------------
  ! Errors and strings
  ! ---------------------------------------------------------------------------------

  ! A NUL-terminated C string as a Fortran string ('' for a null pointer).
  function from_c(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  function to_c(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: c
    c = trim(s) // c_null_char
  end function

  !> Short stable name of a status code ("ok", "invalid_argument", ...).
  function tessera_error_string(code) result(s)
    integer, intent(in) :: code
    character(len=:), allocatable :: s
    s = from_c(c_error_string(int(code, c_int)))
  end function

  !> The message of the last failed tessera call on this thread.
  function tessera_last_error() result(s)
    character(len=:), allocatable :: s
    if (allocated(local_message)) then
      s = local_message
    else
      s = from_c(c_last_error())
    end if
  end function

  function tessera_version() result(s)
    character(len=:), allocatable :: s
    s = from_c(c_version())
  end function

  ! The one exit of every procedure that called C: hand the status to `ierr`, or
  ! report and abort.
  subroutine finish_call(status, ierr)
    integer(c_int), intent(in) :: status
    integer, intent(out), optional :: ierr
    integer(c_int) :: ignored
    ignored = c_set_fortran_caller(0_c_int)
    if (present(ierr)) then
      ierr = int(status)
      return
    end if
    if (status == TESSERA_OK) return
    write(error_unit, '(a)') 'tessera: error (' // tessera_error_string(int(status)) // '): ' // &
      tessera_last_error()
    flush(error_unit)
    ignored = c_abort(status)
  end subroutine

  ! A failure found on the Fortran side.
  ! (TESSERA_ERR_INVALID_ARGUMENT, or `code`.)
  subroutine fail_local(message, ierr, code)
    character(len=*), intent(in) :: message
    integer, intent(out), optional :: ierr
    integer, intent(in), optional :: code
    integer(c_int) :: ignored
    integer :: status
    status = TESSERA_ERR_INVALID_ARGUMENT
    if (present(code)) status = code
    local_message = message
    if (present(ierr)) then
      ierr = status
      return
    end if
    write(error_unit, '(a)') 'tessera: error (' // tessera_error_string(status) // '): ' // message
    flush(error_unit)
    ignored = c_abort(int(status, c_int))
  end subroutine

  ! The message for an array argument that is not contiguous (docs/fortran.md quotes it).
  function not_contiguous(where, arg) result(m)
    character(len=*), intent(in) :: where, arg
    character(len=:), allocatable :: m
    m = where // ": argument '" // arg // "' is not contiguous (a strided section, or a component of an " // &
        "array of derived type such as pts%u); pass a whole array or a contiguous section"
  end function

  ! Forgets a Fortran-side message before a call whose status comes from C, and tells C
  ! that the call comes from Fortran until finish_call: its messages then speak Fortran
  ! (dims in declaration order, 1-based ranges, lon first; docs/fortran.md).
  subroutine begin_call()
    integer(c_int) :: ignored
    if (allocated(local_message)) deallocate(local_message)
    ignored = c_set_fortran_caller(1_c_int)
  end subroutine

#include "tessera_mesh_decomp.inc"
#include "tessera_halo_checkpoint.inc"
#include "tessera_model.inc"
#include "tessera_arrays.inc"
#include "tessera_coupling.inc"
#include "tessera_f08.inc"
#include "tessera_stagger.inc"
#include "tessera_pipeline.inc"
#include "tessera_trainer.inc"

end module tessera
