! tessera: the Fortran interface to tessera's C API (include/tessera/tessera.h).
!
! An existing MPI Fortran code keeps its communicator and its arrays; tessera plans the
! decomposition, fills halos of the caller's arrays in place, writes and reads restarts
! as tessera checkpoints, and runs a trained model (tessera_model: loaded from a
! checkpoint, forward on the caller's fields). See docs/fortran.md.
!
! Conventions
!  - Handles (tessera_mesh, tessera_decomp, tessera_halo, tessera_checkpoint,
!    tessera_model, tessera_redist) wrap a C
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
!  - Ranks and offsets are 0-based like MPI's; box() returns 1-based first indices.
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
  integer, parameter, public :: TESSERA_MODEL_FIELD_EMULATOR = 0, TESSERA_MODEL_DECODER = 1
  integer, parameter, public :: TESSERA_MESH_DP = 0, TESSERA_MESH_TP = 1, TESSERA_MESH_DOMAIN = 2, &
    TESSERA_MESH_WORLD = 3
  integer, parameter, public :: TESSERA_POLE_ZERO = 0, TESSERA_POLE_REPLICATE = 1, &
    TESSERA_POLE_ACROSS_POLE = 2, TESSERA_POLE_ACROSS_POLE_POINT = 3
  integer, parameter, public :: TESSERA_LAYOUT_SHARED = 0, TESSERA_LAYOUT_PER_RANK = 1
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

  public :: tessera_error_string, tessera_last_error, tessera_version
  public :: tessera_mesh_create, tessera_mesh_create_from_file, tessera_mesh_destroy, &
    tessera_mesh_config, tessera_mesh_rank, tessera_mesh_size, tessera_mesh_comm
  public :: tessera_decomp_create, tessera_decomp_create_from_mesh, tessera_decomp_destroy, &
    tessera_decomp_rank, tessera_decomp_size, tessera_decomp_global, tessera_decomp_grid, &
    tessera_decomp_coords, tessera_decomp_box, tessera_decomp_box_of, tessera_decomp_comm, &
    tessera_decomp_scatter, tessera_decomp_gather, tessera_decomp_global_sum, tessera_decomp_auto_grid
  public :: tessera_halo_create, tessera_halo_destroy, tessera_halo_padded, tessera_halo_add_field, &
    tessera_halo_clear_fields, tessera_halo_num_fields, tessera_halo_exchange, tessera_halo_start, &
    tessera_halo_finish, tessera_halo_exchange_adjoint, tessera_halo_start_adjoint, &
    tessera_halo_finish_adjoint, tessera_halo_in_flight, tessera_halo_gather, tessera_halo_scatter
  public :: tessera_checkpoint_begin_save, tessera_checkpoint_begin_load, &
    tessera_checkpoint_set_metadata, tessera_checkpoint_set_keep_last, tessera_checkpoint_set_strict, &
    tessera_checkpoint_add_array, tessera_checkpoint_add_field, tessera_checkpoint_commit, &
    tessera_checkpoint_step, tessera_checkpoint_metadata, tessera_checkpoint_destroy
  public :: tessera_model_load, tessera_model_destroy, tessera_model_info, tessera_model_box, &
    tessera_model_predict, tessera_model_forward, tessera_model_type, tessera_model_vocab, tessera_model_logits
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
  interface tessera_decomp_create
    module procedure decomp_create_int
#ifdef TESSERA_HAVE_MPI_F08
    module procedure decomp_create_f08
#endif
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

  ! ---------------------------------------------------------------------------------
  ! The C API.
  ! ---------------------------------------------------------------------------------
  interface
    function c_error_string(code) bind(c, name="tessera_error_string")
      import :: c_int, c_ptr
      integer(c_int), value :: code
      type(c_ptr) :: c_error_string
    end function
    function c_last_error() bind(c, name="tessera_last_error")
      import :: c_ptr
      type(c_ptr) :: c_last_error
    end function
    function c_version() bind(c, name="tessera_version")
      import :: c_ptr
      type(c_ptr) :: c_version
    end function
    function c_abort(code) bind(c, name="tessera_abort")
      import :: c_int
      integer(c_int), value :: code
      integer(c_int) :: c_abort
    end function
    function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function

    function c_mesh_create_f(comm, data, tensor, domain, mesh) bind(c, name="tessera_mesh_create_f")
      import :: c_int, c_ptr
      integer(c_int), value :: comm, data, tensor, domain
      type(c_ptr) :: mesh
      integer(c_int) :: c_mesh_create_f
    end function
    function c_mesh_create_from_file_f(comm, path, mesh) bind(c, name="tessera_mesh_create_from_file_f")
      import :: c_int, c_ptr, c_char
      integer(c_int), value :: comm
      character(kind=c_char), intent(in) :: path(*)
      type(c_ptr) :: mesh
      integer(c_int) :: c_mesh_create_from_file_f
    end function
    function c_mesh_destroy(mesh) bind(c, name="tessera_mesh_destroy")
      import :: c_int, c_ptr
      type(c_ptr) :: mesh
      integer(c_int) :: c_mesh_destroy
    end function
    function c_mesh_config(mesh, data, tensor, domain) bind(c, name="tessera_mesh_config")
      import :: c_int, c_ptr
      type(c_ptr), value :: mesh
      integer(c_int) :: data, tensor, domain
      integer(c_int) :: c_mesh_config
    end function
    function c_mesh_rank(mesh, dim, rank) bind(c, name="tessera_mesh_rank")
      import :: c_int, c_ptr
      type(c_ptr), value :: mesh
      integer(c_int), value :: dim
      integer(c_int) :: rank
      integer(c_int) :: c_mesh_rank
    end function
    function c_mesh_size(mesh, dim, size) bind(c, name="tessera_mesh_size")
      import :: c_int, c_ptr
      type(c_ptr), value :: mesh
      integer(c_int), value :: dim
      integer(c_int) :: size
      integer(c_int) :: c_mesh_size
    end function
    function c_mesh_comm_f(mesh, dim, comm) bind(c, name="tessera_mesh_comm_f")
      import :: c_int, c_ptr
      type(c_ptr), value :: mesh
      integer(c_int), value :: dim
      integer(c_int) :: comm
      integer(c_int) :: c_mesh_comm_f
    end function

    function c_decomp_create_f(comm, nlat, nlon, grid_lat, grid_lon, decomp) bind(c, name="tessera_decomp_create_f")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: comm
      integer(c_int64_t), value :: nlat, nlon
      integer(c_int), value :: grid_lat, grid_lon
      type(c_ptr) :: decomp
      integer(c_int) :: c_decomp_create_f
    end function
    function c_decomp_create_from_mesh(mesh, nlat, nlon, grid_lat, grid_lon, decomp) &
        bind(c, name="tessera_decomp_create_from_mesh")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: mesh
      integer(c_int64_t), value :: nlat, nlon
      integer(c_int), value :: grid_lat, grid_lon
      type(c_ptr) :: decomp
      integer(c_int) :: c_decomp_create_from_mesh
    end function
    function c_decomp_destroy(decomp) bind(c, name="tessera_decomp_destroy")
      import :: c_int, c_ptr
      type(c_ptr) :: decomp
      integer(c_int) :: c_decomp_destroy
    end function
    function c_decomp_rank(decomp, rank) bind(c, name="tessera_decomp_rank")
      import :: c_int, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int) :: rank
      integer(c_int) :: c_decomp_rank
    end function
    function c_decomp_size(decomp, size) bind(c, name="tessera_decomp_size")
      import :: c_int, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int) :: size
      integer(c_int) :: c_decomp_size
    end function
    function c_decomp_global(decomp, nlat, nlon) bind(c, name="tessera_decomp_global")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int64_t) :: nlat, nlon
      integer(c_int) :: c_decomp_global
    end function
    function c_decomp_grid(decomp, grid_lat, grid_lon) bind(c, name="tessera_decomp_grid")
      import :: c_int, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int) :: grid_lat, grid_lon
      integer(c_int) :: c_decomp_grid
    end function
    function c_decomp_coords(decomp, lat, lon) bind(c, name="tessera_decomp_coords")
      import :: c_int, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int) :: lat, lon
      integer(c_int) :: c_decomp_coords
    end function
    function c_decomp_box_of(decomp, rank, lat_start, lat_count, lon_start, lon_count) &
        bind(c, name="tessera_decomp_box_of")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int), value :: rank
      integer(c_int64_t) :: lat_start, lat_count, lon_start, lon_count
      integer(c_int) :: c_decomp_box_of
    end function
    function c_decomp_comm_f(decomp, comm) bind(c, name="tessera_decomp_comm_f")
      import :: c_int, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int) :: comm
      integer(c_int) :: c_decomp_comm_f
    end function
    function c_decomp_scatter(decomp, global, local, dtype, order, ndim, shape, root) &
        bind(c, name="tessera_decomp_scatter")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: decomp, global, local
      integer(c_int), value :: dtype, order, ndim, root
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: c_decomp_scatter
    end function
    function c_decomp_gather(decomp, local, global, dtype, order, ndim, shape, root) &
        bind(c, name="tessera_decomp_gather")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: decomp, local, global
      integer(c_int), value :: dtype, order, ndim, root
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: c_decomp_gather
    end function
    function c_decomp_global_sum(decomp, local, dtype, order, ndim, shape, total) &
        bind(c, name="tessera_decomp_global_sum")
      import :: c_int, c_int64_t, c_ptr, c_double
      type(c_ptr), value :: decomp, local
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      real(c_double), intent(out) :: total
      integer(c_int) :: c_decomp_global_sum
    end function
    function c_decomp_auto_grid(ranks, nlat, nlon, grid_lat, grid_lon) bind(c, name="tessera_decomp_auto_grid")
      import :: c_int, c_int64_t
      integer(c_int), value :: ranks
      integer(c_int64_t), value :: nlat, nlon
      integer(c_int), intent(out) :: grid_lat, grid_lon
      integer(c_int) :: c_decomp_auto_grid
    end function

    function c_halo_create(decomp, lat_before, lat_after, lon_before, lon_after, periodic, pole, halo) &
        bind(c, name="tessera_halo_create")
      import :: c_int, c_ptr
      type(c_ptr), value :: decomp
      integer(c_int), value :: lat_before, lat_after, lon_before, lon_after, periodic, pole
      type(c_ptr) :: halo
      integer(c_int) :: c_halo_create
    end function
    function c_halo_destroy(halo) bind(c, name="tessera_halo_destroy")
      import :: c_int, c_ptr
      type(c_ptr) :: halo
      integer(c_int) :: c_halo_destroy
    end function
    function c_halo_padded(halo, lat, lon) bind(c, name="tessera_halo_padded")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: halo
      integer(c_int64_t) :: lat, lon
      integer(c_int) :: c_halo_padded
    end function
    function c_halo_add_field(halo, data, dtype, order, ndim, shape, index) bind(c, name="tessera_halo_add_field")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: halo, data
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: index
      integer(c_int) :: c_halo_add_field
    end function
    function c_halo_clear_fields(halo) bind(c, name="tessera_halo_clear_fields")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: c_halo_clear_fields
    end function
    function c_halo_num_fields(halo, count) bind(c, name="tessera_halo_num_fields")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: count
      integer(c_int) :: c_halo_num_fields
    end function
    function c_halo_exchange(halo) bind(c, name="tessera_halo_exchange")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: c_halo_exchange
    end function
    function c_halo_start(halo) bind(c, name="tessera_halo_start")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: c_halo_start
    end function
    function c_halo_finish(halo) bind(c, name="tessera_halo_finish")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: c_halo_finish
    end function
    function c_halo_exchange_adjoint(halo) bind(c, name="tessera_halo_exchange_adjoint")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: c_halo_exchange_adjoint
    end function
    function c_halo_start_adjoint(halo) bind(c, name="tessera_halo_start_adjoint")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: c_halo_start_adjoint
    end function
    function c_halo_finish_adjoint(halo) bind(c, name="tessera_halo_finish_adjoint")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: c_halo_finish_adjoint
    end function
    function c_halo_in_flight(halo, flag) bind(c, name="tessera_halo_in_flight")
      import :: c_int, c_ptr
      type(c_ptr), value :: halo
      integer(c_int) :: flag
      integer(c_int) :: c_halo_in_flight
    end function
    function c_halo_gather(halo, field, global, dtype, order, ndim, shape, root) bind(c, name="tessera_halo_gather")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: halo, field, global
      integer(c_int), value :: dtype, order, ndim, root
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: c_halo_gather
    end function
    function c_halo_scatter(halo, global, field, dtype, order, ndim, shape, root) bind(c, name="tessera_halo_scatter")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: halo, global, field
      integer(c_int), value :: dtype, order, ndim, root
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: c_halo_scatter
    end function

    function c_checkpoint_begin_save(mesh, root_dir, step, layout, checkpoint) &
        bind(c, name="tessera_checkpoint_begin_save")
      import :: c_int, c_int64_t, c_ptr, c_char
      type(c_ptr), value :: mesh
      character(kind=c_char), intent(in) :: root_dir(*)
      integer(c_int64_t), value :: step
      integer(c_int), value :: layout
      type(c_ptr) :: checkpoint
      integer(c_int) :: c_checkpoint_begin_save
    end function
    function c_checkpoint_begin_load(mesh, path, checkpoint) bind(c, name="tessera_checkpoint_begin_load")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: mesh
      character(kind=c_char), intent(in) :: path(*)
      type(c_ptr) :: checkpoint
      integer(c_int) :: c_checkpoint_begin_load
    end function
    function c_checkpoint_set_metadata(checkpoint, metadata) bind(c, name="tessera_checkpoint_set_metadata")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: checkpoint
      character(kind=c_char), intent(in) :: metadata(*)
      integer(c_int) :: c_checkpoint_set_metadata
    end function
    function c_checkpoint_set_keep_last(checkpoint, keep_last) bind(c, name="tessera_checkpoint_set_keep_last")
      import :: c_int, c_ptr
      type(c_ptr), value :: checkpoint
      integer(c_int), value :: keep_last
      integer(c_int) :: c_checkpoint_set_keep_last
    end function
    function c_checkpoint_set_strict(checkpoint, strict) bind(c, name="tessera_checkpoint_set_strict")
      import :: c_int, c_ptr
      type(c_ptr), value :: checkpoint
      integer(c_int), value :: strict
      integer(c_int) :: c_checkpoint_set_strict
    end function
    function c_checkpoint_add_array(checkpoint, name, data, dtype, order, ndim, global_shape, local_offset, &
                                    local_shape, placement) bind(c, name="tessera_checkpoint_add_array")
      import :: c_int, c_int64_t, c_ptr, c_char
      type(c_ptr), value :: checkpoint
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: data
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: global_shape(*), local_offset(*), local_shape(*)
      character(kind=c_char), intent(in) :: placement(*)
      integer(c_int) :: c_checkpoint_add_array
    end function
    function c_checkpoint_add_halo_field(checkpoint, name, halo, field, dtype, order, ndim, shape) &
        bind(c, name="tessera_checkpoint_add_halo_field")
      import :: c_int, c_int64_t, c_ptr, c_char
      type(c_ptr), value :: checkpoint
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: halo, field
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: c_checkpoint_add_halo_field
    end function
    function c_checkpoint_commit(checkpoint) bind(c, name="tessera_checkpoint_commit")
      import :: c_int, c_ptr
      type(c_ptr), value :: checkpoint
      integer(c_int) :: c_checkpoint_commit
    end function
    function c_checkpoint_step(checkpoint, step) bind(c, name="tessera_checkpoint_step")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: checkpoint
      integer(c_int64_t) :: step
      integer(c_int) :: c_checkpoint_step
    end function
    function c_checkpoint_metadata(checkpoint, metadata) bind(c, name="tessera_checkpoint_metadata")
      import :: c_int, c_ptr
      type(c_ptr), value :: checkpoint
      type(c_ptr) :: metadata
      integer(c_int) :: c_checkpoint_metadata
    end function
    function c_checkpoint_destroy(checkpoint) bind(c, name="tessera_checkpoint_destroy")
      import :: c_int, c_ptr
      type(c_ptr) :: checkpoint
      integer(c_int) :: c_checkpoint_destroy
    end function

    function c_model_load(mesh, path, model) bind(c, name="tessera_model_load")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: mesh
      character(kind=c_char), intent(in) :: path(*)
      type(c_ptr) :: model
      integer(c_int) :: c_model_load
    end function
    function c_model_destroy(model) bind(c, name="tessera_model_destroy")
      import :: c_int, c_ptr
      type(c_ptr) :: model
      integer(c_int) :: c_model_destroy
    end function
    function c_model_info(model, channels, nlat, nlon) bind(c, name="tessera_model_info")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: model
      integer(c_int64_t) :: channels, nlat, nlon
      integer(c_int) :: c_model_info
    end function
    function c_model_box(model, lat_start, lat_count, lon_start, lon_count) bind(c, name="tessera_model_box")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: model
      integer(c_int64_t) :: lat_start, lat_count, lon_start, lon_count
      integer(c_int) :: c_model_box
    end function
    function c_model_run(model, input, output, dtype, order, ndim, shape) bind(c, name="tessera_model_predict")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: model, input, output
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: c_model_run
    end function
    function c_model_forward(model, input, output, dtype, order, ndim, shape) bind(c, name="tessera_model_forward")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: model, input, output
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: c_model_forward
    end function
    function c_model_train_step(model, input, target, dtype, order, ndim, shape, optimizer, lr, loss) &
        bind(c, name="tessera_model_train_step")
      import :: c_int, c_int64_t, c_ptr, c_char, c_double
      type(c_ptr), value :: model, input, target
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      character(kind=c_char), intent(in) :: optimizer(*)
      real(c_double), value :: lr
      real(c_double), intent(out) :: loss
      integer(c_int) :: c_model_train_step
    end function

    function c_redist_create(decomp, nmodel, model_ranks, grid_lat, grid_lon, replicas, redist) &
        bind(c, name="tessera_redist_create")
      import :: c_int, c_ptr
      type(c_ptr), value :: decomp, model_ranks
      integer(c_int), value :: nmodel, grid_lat, grid_lon, replicas
      type(c_ptr) :: redist
      integer(c_int) :: c_redist_create
    end function
    function c_redist_destroy(redist) bind(c, name="tessera_redist_destroy")
      import :: c_int, c_ptr
      type(c_ptr) :: redist
      integer(c_int) :: c_redist_destroy
    end function
    function c_redist_model_size(redist, size) bind(c, name="tessera_redist_model_size")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: size
      integer(c_int) :: c_redist_model_size
    end function
    function c_redist_model_rank(redist, rank) bind(c, name="tessera_redist_model_rank")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: rank
      integer(c_int) :: c_redist_model_rank
    end function
    function c_redist_model_box(redist, lat_start, lat_count, lon_start, lon_count) &
        bind(c, name="tessera_redist_model_box")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: redist
      integer(c_int64_t) :: lat_start, lat_count, lon_start, lon_count
      integer(c_int) :: c_redist_model_box
    end function
    function c_redist_model_comm_f(redist, comm) bind(c, name="tessera_redist_model_comm_f")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: comm
      integer(c_int) :: c_redist_model_comm_f
    end function
    function c_redist_add_field(redist, code, model, dtype, order, ndim, shape, index) &
        bind(c, name="tessera_redist_add_field")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: redist, code, model
      integer(c_int), value :: dtype, order, ndim
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: index
      integer(c_int) :: c_redist_add_field
    end function
    function c_redist_clear_fields(redist) bind(c, name="tessera_redist_clear_fields")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: c_redist_clear_fields
    end function
    function c_redist_num_fields(redist, count) bind(c, name="tessera_redist_num_fields")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: count
      integer(c_int) :: c_redist_num_fields
    end function
    function c_redist_to_model(redist) bind(c, name="tessera_redist_to_model")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: c_redist_to_model
    end function
    function c_redist_to_code(redist) bind(c, name="tessera_redist_to_code")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: c_redist_to_code
    end function
    function c_redist_start_to_model(redist) bind(c, name="tessera_redist_start_to_model")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: c_redist_start_to_model
    end function
    function c_redist_start_to_code(redist) bind(c, name="tessera_redist_start_to_code")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: c_redist_start_to_code
    end function
    function c_redist_finish(redist) bind(c, name="tessera_redist_finish")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: c_redist_finish
    end function
    function c_redist_in_flight(redist, flag) bind(c, name="tessera_redist_in_flight")
      import :: c_int, c_ptr
      type(c_ptr), value :: redist
      integer(c_int) :: flag
      integer(c_int) :: c_redist_in_flight
    end function
    function c_model_load_coupled(decomp, path, nmodel, model_ranks, tensor, model) &
        bind(c, name="tessera_model_load_coupled")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: decomp
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int), value :: nmodel, tensor
      type(c_ptr), value :: model_ranks
      type(c_ptr) :: model
      integer(c_int) :: c_model_load_coupled
    end function
    function c_model_type(model, type) bind(c, name="tessera_model_type")
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int) :: type
      integer(c_int) :: c_model_type
    end function
    function c_model_vocab(model, vocab) bind(c, name="tessera_model_vocab")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: model
      integer(c_int64_t) :: vocab
      integer(c_int) :: c_model_vocab
    end function
    function c_model_logits(model, ids, batch, seq, logits, vocab) bind(c, name="tessera_model_logits")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: model, ids, logits
      integer(c_int64_t), value :: batch, seq, vocab
      integer(c_int) :: c_model_logits
    end function
    function c_model_coupling(model, model_size, model_rank) bind(c, name="tessera_model_coupling")
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int) :: model_size, model_rank
      integer(c_int) :: c_model_coupling
    end function

    ! ISO_Fortran_binding.h (Fortran 2018), from the Fortran runtime: 1 when the C
    ! descriptor of the array `a` (rank >= 1) describes contiguous memory. It reads the
    ! memory strides, where gfortran's is_contiguous() on a pointer dummy does not.
    function c_cfi_is_contiguous(a) bind(c, name="CFI_is_contiguous")
      import :: c_int
      type(*), intent(in) :: a(..)
      integer(c_int) :: c_cfi_is_contiguous
    end function
  end interface

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
  subroutine fail_local(message, ierr)
    character(len=*), intent(in) :: message
    integer, intent(out), optional :: ierr
    integer(c_int) :: ignored
    local_message = message
    if (present(ierr)) then
      ierr = TESSERA_ERR_INVALID_ARGUMENT
      return
    end if
    write(error_unit, '(a)') 'tessera: error (invalid_argument): ' // message
    flush(error_unit)
    ignored = c_abort(int(TESSERA_ERR_INVALID_ARGUMENT, c_int))
  end subroutine

  ! The message for an array argument that is not contiguous (docs/fortran.md quotes it).
  function not_contiguous(where, arg) result(m)
    character(len=*), intent(in) :: where, arg
    character(len=:), allocatable :: m
    m = where // ": argument '" // arg // "' is not contiguous (a strided section, or a component of an " // &
        "array of derived type such as pts%u); pass a whole array or a contiguous section"
  end function

  ! Forgets a Fortran-side message before a call whose status comes from C.
  subroutine begin_call()
    if (allocated(local_message)) deallocate(local_message)
  end subroutine

  ! ---------------------------------------------------------------------------------
  ! Mesh
  ! ---------------------------------------------------------------------------------

  !> Collective over `comm`: the dp x tp x domain mesh (data: TESSERA_DATA_*).
  subroutine mesh_create_int(mesh, comm, data, tensor, domain, ierr)
    type(tessera_mesh), intent(inout) :: mesh
    integer, intent(in) :: comm, data, tensor, domain
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_mesh_create_f(int(comm, c_int), int(data, c_int), int(tensor, c_int), &
                                     int(domain, c_int), mesh%ptr), ierr)
  end subroutine

  !> Collective over `comm`: the mesh of a YAML parallelism config file.
  subroutine mesh_create_from_file_int(mesh, comm, path, ierr)
    type(tessera_mesh), intent(inout) :: mesh
    integer, intent(in) :: comm
    character(len=*), intent(in) :: path
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_mesh_create_from_file_f(int(comm, c_int), to_c(path), mesh%ptr), ierr)
  end subroutine

  subroutine tessera_mesh_destroy(mesh, ierr)
    type(tessera_mesh), intent(inout) :: mesh
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_mesh_destroy(mesh%ptr), ierr)
  end subroutine

  subroutine tessera_mesh_config(mesh, data, tensor, domain, ierr)
    type(tessera_mesh), intent(in) :: mesh
    integer, intent(out) :: data, tensor, domain
    integer, intent(out), optional :: ierr
    integer(c_int) :: d, t, m
    call begin_call()
    d = 0; t = 0; m = 0
    call finish_call(c_mesh_config(mesh%ptr, d, t, m), ierr)
    data = int(d); tensor = int(t); domain = int(m)
  end subroutine

  !> This rank's 0-based coordinate along `dim` (TESSERA_MESH_*).
  subroutine tessera_mesh_rank(mesh, dim, rank, ierr)
    type(tessera_mesh), intent(in) :: mesh
    integer, intent(in) :: dim
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: r
    call begin_call()
    r = 0
    call finish_call(c_mesh_rank(mesh%ptr, int(dim, c_int), r), ierr)
    rank = int(r)
  end subroutine

  subroutine tessera_mesh_size(mesh, dim, size, ierr)
    type(tessera_mesh), intent(in) :: mesh
    integer, intent(in) :: dim
    integer, intent(out) :: size
    integer, intent(out), optional :: ierr
    integer(c_int) :: s
    call begin_call()
    s = 0
    call finish_call(c_mesh_size(mesh%ptr, int(dim, c_int), s), ierr)
    size = int(s)
  end subroutine

  !> The Fortran handle of the communicator of `dim` (owned by the mesh: do not free).
  subroutine mesh_comm_int(mesh, dim, comm, ierr)
    type(tessera_mesh), intent(in) :: mesh
    integer, intent(in) :: dim
    integer, intent(out) :: comm
    integer, intent(out), optional :: ierr
    integer(c_int) :: c
    call begin_call()
    c = 0
    call finish_call(c_mesh_comm_f(mesh%ptr, int(dim, c_int), c), ierr)
    comm = int(c)
  end subroutine

  ! ---------------------------------------------------------------------------------
  ! Decomposition
  ! ---------------------------------------------------------------------------------

  !> Collective over `comm`: nlat x nlon on a grid_lat x grid_lon process grid
  !> (0, 0: split along latitude only).
  subroutine decomp_create_int(decomp, comm, nlat, nlon, grid_lat, grid_lon, ierr)
    type(tessera_decomp), intent(inout) :: decomp
    integer, intent(in) :: comm, nlat, nlon, grid_lat, grid_lon
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_decomp_create_f(int(comm, c_int), int(nlat, c_int64_t), int(nlon, c_int64_t), &
                                       int(grid_lat, c_int), int(grid_lon, c_int), decomp%ptr), ierr)
  end subroutine

  !> Collective over the mesh's domain communicator.
  subroutine tessera_decomp_create_from_mesh(decomp, mesh, nlat, nlon, grid_lat, grid_lon, ierr)
    type(tessera_decomp), intent(inout) :: decomp
    type(tessera_mesh), intent(in) :: mesh
    integer, intent(in) :: nlat, nlon, grid_lat, grid_lon
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_decomp_create_from_mesh(mesh%ptr, int(nlat, c_int64_t), int(nlon, c_int64_t), &
                                               int(grid_lat, c_int), int(grid_lon, c_int), decomp%ptr), ierr)
  end subroutine

  subroutine tessera_decomp_destroy(decomp, ierr)
    type(tessera_decomp), intent(inout) :: decomp
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_decomp_destroy(decomp%ptr), ierr)
  end subroutine

  subroutine tessera_decomp_rank(decomp, rank, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: r
    call begin_call()
    r = 0
    call finish_call(c_decomp_rank(decomp%ptr, r), ierr)
    rank = int(r)
  end subroutine

  subroutine tessera_decomp_size(decomp, size, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(out) :: size
    integer, intent(out), optional :: ierr
    integer(c_int) :: s
    call begin_call()
    s = 0
    call finish_call(c_decomp_size(decomp%ptr, s), ierr)
    size = int(s)
  end subroutine

  subroutine tessera_decomp_global(decomp, nlat, nlon, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(out) :: nlat, nlon
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: a, b
    call begin_call()
    a = 0; b = 0
    call finish_call(c_decomp_global(decomp%ptr, a, b), ierr)
    nlat = int(a); nlon = int(b)
  end subroutine

  !> Not collective: the process grid for `ranks` ranks that gives each rank of an
  !> nlat x nlon grid the shortest box boundary (docs/domain.md); pass it to
  !> tessera_decomp_create.
  subroutine tessera_decomp_auto_grid(ranks, nlat, nlon, grid_lat, grid_lon, ierr)
    integer, intent(in) :: ranks, nlat, nlon
    integer, intent(out) :: grid_lat, grid_lon
    integer, intent(out), optional :: ierr
    integer(c_int) :: a, b
    call begin_call()
    a = 0; b = 0
    call finish_call(c_decomp_auto_grid(int(ranks, c_int), int(nlat, c_int64_t), int(nlon, c_int64_t), a, b), ierr)
    grid_lat = int(a); grid_lon = int(b)
  end subroutine

  subroutine tessera_decomp_grid(decomp, grid_lat, grid_lon, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(out) :: grid_lat, grid_lon
    integer, intent(out), optional :: ierr
    integer(c_int) :: a, b
    call begin_call()
    a = 0; b = 0
    call finish_call(c_decomp_grid(decomp%ptr, a, b), ierr)
    grid_lat = int(a); grid_lon = int(b)
  end subroutine

  subroutine tessera_decomp_coords(decomp, lat, lon, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(out) :: lat, lon
    integer, intent(out), optional :: ierr
    integer(c_int) :: a, b
    call begin_call()
    a = 0; b = 0
    call finish_call(c_decomp_coords(decomp%ptr, a, b), ierr)
    lat = int(a); lon = int(b)
  end subroutine

  !> This rank's box: 1-based first global indices and counts.
  subroutine tessera_decomp_box(decomp, lat_first, lat_count, lon_first, lon_count, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(out) :: lat_first, lat_count, lon_first, lon_count
    integer, intent(out), optional :: ierr
    integer(c_int) :: r, status
    call begin_call()
    r = 0
    status = c_decomp_rank(decomp%ptr, r)
    if (status /= TESSERA_OK) then
      lat_first = 0; lat_count = 0; lon_first = 0; lon_count = 0
      call finish_call(status, ierr)
      return
    end if
    call tessera_decomp_box_of(decomp, int(r), lat_first, lat_count, lon_first, lon_count, ierr)
  end subroutine

  !> The box of domain rank `rank` (0-based): 1-based first global indices and counts.
  subroutine tessera_decomp_box_of(decomp, rank, lat_first, lat_count, lon_first, lon_count, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(in) :: rank
    integer, intent(out) :: lat_first, lat_count, lon_first, lon_count
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: a, b, c, d
    call begin_call()
    a = -1; b = 0; c = -1; d = 0
    call finish_call(c_decomp_box_of(decomp%ptr, int(rank, c_int), a, b, c, d), ierr)
    lat_first = int(a) + 1; lat_count = int(b); lon_first = int(c) + 1; lon_count = int(d)
  end subroutine

  subroutine decomp_comm_int(decomp, comm, ierr)
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(out) :: comm
    integer, intent(out), optional :: ierr
    integer(c_int) :: c
    call begin_call()
    c = 0
    call finish_call(c_decomp_comm_f(decomp%ptr, c), ierr)
    comm = int(c)
  end subroutine

  ! ---------------------------------------------------------------------------------
  ! Halo exchange
  ! ---------------------------------------------------------------------------------

  !> Collective: a halo plan. Widths per side ("before" = the low-index side),
  !> periodic longitude, pole policy TESSERA_POLE_*.
  subroutine tessera_halo_create(halo, decomp, lat_before, lat_after, lon_before, lon_after, periodic_lon, &
                                 pole, ierr)
    type(tessera_halo), intent(inout) :: halo
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(in) :: lat_before, lat_after, lon_before, lon_after, pole
    logical, intent(in) :: periodic_lon
    integer, intent(out), optional :: ierr
    integer(c_int) :: periodic
    call begin_call()
    periodic = 0
    if (periodic_lon) periodic = 1
    call finish_call(c_halo_create(decomp%ptr, int(lat_before, c_int), int(lat_after, c_int), &
                                   int(lon_before, c_int), int(lon_after, c_int), periodic, int(pole, c_int), &
                                   halo%ptr), ierr)
  end subroutine

  subroutine tessera_halo_destroy(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_destroy(halo%ptr), ierr)
  end subroutine

  !> Padded local extents: declare fields q(nlon_padded, nlat_padded[, levels...]).
  subroutine tessera_halo_padded(halo, nlat_padded, nlon_padded, ierr)
    type(tessera_halo), intent(in) :: halo
    integer, intent(out) :: nlat_padded, nlon_padded
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: a, b
    call begin_call()
    a = 0; b = 0
    call finish_call(c_halo_padded(halo%ptr, a, b), ierr)
    nlat_padded = int(a); nlon_padded = int(b)
  end subroutine

  subroutine tessera_halo_clear_fields(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_clear_fields(halo%ptr), ierr)
  end subroutine

  subroutine tessera_halo_num_fields(halo, count, ierr)
    type(tessera_halo), intent(in) :: halo
    integer, intent(out) :: count
    integer, intent(out), optional :: ierr
    integer(c_int) :: n
    call begin_call()
    n = 0
    call finish_call(c_halo_num_fields(halo%ptr, n), ierr)
    count = int(n)
  end subroutine

  !> Collective: fill the halos of every registered field.
  subroutine tessera_halo_exchange(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_exchange(halo%ptr), ierr)
  end subroutine

  subroutine tessera_halo_start(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_start(halo%ptr), ierr)
  end subroutine

  subroutine tessera_halo_finish(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_finish(halo%ptr), ierr)
  end subroutine

  !> Collective: the transpose (halo values added into their source cells, halos zeroed).
  subroutine tessera_halo_exchange_adjoint(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_exchange_adjoint(halo%ptr), ierr)
  end subroutine

  subroutine tessera_halo_start_adjoint(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_start_adjoint(halo%ptr), ierr)
  end subroutine

  subroutine tessera_halo_finish_adjoint(halo, ierr)
    type(tessera_halo), intent(inout) :: halo
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_halo_finish_adjoint(halo%ptr), ierr)
  end subroutine

  subroutine tessera_halo_in_flight(halo, in_flight, ierr)
    type(tessera_halo), intent(in) :: halo
    logical, intent(out) :: in_flight
    integer, intent(out), optional :: ierr
    integer(c_int) :: flag
    call begin_call()
    flag = 0
    call finish_call(c_halo_in_flight(halo%ptr, flag), ierr)
    in_flight = flag /= 0
  end subroutine

  ! ---------------------------------------------------------------------------------
  ! Checkpoints
  ! ---------------------------------------------------------------------------------

  !> Local: start a save into root_dir/step_<step>/ (layout TESSERA_LAYOUT_*).
  subroutine tessera_checkpoint_begin_save(checkpoint, mesh, root_dir, step, layout, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    type(tessera_mesh), intent(in) :: mesh
    character(len=*), intent(in) :: root_dir
    integer, intent(in) :: step, layout
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_checkpoint_begin_save(mesh%ptr, to_c(root_dir), int(step, c_int64_t), int(layout, c_int), &
                                             checkpoint%ptr), ierr)
  end subroutine

  !> Local: start a load from a checkpoint.h5, a step directory or a root directory.
  subroutine tessera_checkpoint_begin_load(checkpoint, mesh, path, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    type(tessera_mesh), intent(in) :: mesh
    character(len=*), intent(in) :: path
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_checkpoint_begin_load(mesh%ptr, to_c(path), checkpoint%ptr), ierr)
  end subroutine

  subroutine tessera_checkpoint_set_metadata(checkpoint, metadata, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    character(len=*), intent(in) :: metadata
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_checkpoint_set_metadata(checkpoint%ptr, to_c(metadata)), ierr)
  end subroutine

  subroutine tessera_checkpoint_set_keep_last(checkpoint, keep_last, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    integer, intent(in) :: keep_last
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_checkpoint_set_keep_last(checkpoint%ptr, int(keep_last, c_int)), ierr)
  end subroutine

  subroutine tessera_checkpoint_set_strict(checkpoint, strict, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    logical, intent(in) :: strict
    integer, intent(out), optional :: ierr
    integer(c_int) :: flag
    call begin_call()
    flag = 0
    if (strict) flag = 1
    call finish_call(c_checkpoint_set_strict(checkpoint%ptr, flag), ierr)
  end subroutine

  !> Collective over the mesh: write (atomically) or read and verify every added array.
  subroutine tessera_checkpoint_commit(checkpoint, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_checkpoint_commit(checkpoint%ptr), ierr)
  end subroutine

  !> The step saved, or (after a load's commit) the step read.
  subroutine tessera_checkpoint_step(checkpoint, step, ierr)
    type(tessera_checkpoint), intent(in) :: checkpoint
    integer, intent(out) :: step
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s
    call begin_call()
    s = 0
    call finish_call(c_checkpoint_step(checkpoint%ptr, s), ierr)
    step = int(s)
  end subroutine

  subroutine tessera_checkpoint_metadata(checkpoint, metadata, ierr)
    type(tessera_checkpoint), intent(in) :: checkpoint
    character(len=:), allocatable, intent(out) :: metadata
    integer, intent(out), optional :: ierr
    type(c_ptr) :: p
    integer(c_int) :: status
    call begin_call()
    p = c_null_ptr
    status = c_checkpoint_metadata(checkpoint%ptr, p)
    metadata = from_c(p)
    call finish_call(status, ierr)
  end subroutine

  subroutine tessera_checkpoint_destroy(checkpoint, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_checkpoint_destroy(checkpoint%ptr), ierr)
  end subroutine

  ! ---------------------------------------------------------------------------------
  ! Model inference: a field emulator trained by tessera-run, on real32 fields
  ! x(nlon, nlat_band, channels[, batch]) of this rank's latitude band.
  ! ---------------------------------------------------------------------------------

  !> Collective over the mesh: rebuild the model stored in a checkpoint.
  subroutine tessera_model_load(model, mesh, path, ierr)
    type(tessera_model), intent(inout) :: model
    type(tessera_mesh), intent(in) :: mesh
    character(len=*), intent(in) :: path
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_model_load(mesh%ptr, to_c(path), model%ptr), ierr)
  end subroutine

  subroutine tessera_model_destroy(model, ierr)
    type(tessera_model), intent(inout) :: model
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_model_destroy(model%ptr), ierr)
  end subroutine

  subroutine tessera_model_info(model, channels, nlat, nlon, ierr)
    type(tessera_model), intent(in) :: model
    integer, intent(out) :: channels, nlat, nlon
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: a, b, c
    call begin_call()
    a = 0; b = 0; c = 0
    call finish_call(c_model_info(model%ptr, a, b, c), ierr)
    channels = int(a); nlat = int(b); nlon = int(c)
  end subroutine

  !> This rank's band: 1-based first global indices and counts.
  subroutine tessera_model_box(model, lat_first, lat_count, lon_first, lon_count, ierr)
    type(tessera_model), intent(in) :: model
    integer, intent(out) :: lat_first, lat_count, lon_first, lon_count
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: a, b, c, d
    call begin_call()
    a = -1; b = 0; c = -1; d = 0
    call finish_call(c_model_box(model%ptr, a, b, c, d), ierr)
    lat_first = int(a) + 1; lat_count = int(b); lon_first = int(c) + 1; lon_count = int(d)
  end subroutine

  !> Collective: the next state in physical units (output may be the input array).
  subroutine tessera_model_predict(model, input, output, ierr)
    type(tessera_model), intent(inout) :: model
    real(real32), intent(in), target :: input(..)
    real(real32), intent(inout), target :: output(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), o(MAX_DIMS)
    if (.not. describe_r32(input, s, 'tessera_model_predict', 'input', ierr)) return
    if (.not. describe_r32(output, o, 'tessera_model_predict', 'output', ierr)) return
    if (any(s /= o)) then
      call fail_local('tessera_model_predict: output and input have different shapes', ierr)
      return
    end if
    call begin_call()
    call finish_call(c_model_run(model%ptr, c_loc(input), c_loc(output), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                 int(rank(input), c_int), s), ierr)
  end subroutine

  !> Collective: the next state of normalised fields.
  subroutine tessera_model_forward(model, input, output, ierr)
    type(tessera_model), intent(inout) :: model
    real(real32), intent(in), target :: input(..)
    real(real32), intent(inout), target :: output(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), o(MAX_DIMS)
    if (.not. describe_r32(input, s, 'tessera_model_forward', 'input', ierr)) return
    if (.not. describe_r32(output, o, 'tessera_model_forward', 'output', ierr)) return
    if (any(s /= o)) then
      call fail_local('tessera_model_forward: output and input have different shapes', ierr)
      return
    end if
    call begin_call()
    call finish_call(c_model_forward(model%ptr, c_loc(input), c_loc(output), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                     int(rank(input), c_int), s), ierr)
  end subroutine

  !> TESSERA_MODEL_FIELD_EMULATOR (0) or TESSERA_MODEL_DECODER (1).
  subroutine tessera_model_type(model, type, ierr)
    type(tessera_model), intent(in) :: model
    integer, intent(out) :: type
    integer, intent(out), optional :: ierr
    integer(c_int) :: t
    call begin_call()
    t = -1
    call finish_call(c_model_type(model%ptr, t), ierr)
    type = int(t)
  end subroutine

  !> A decoder's vocabulary size: the first extent of its logits array.
  subroutine tessera_model_vocab(model, vocab, ierr)
    type(tessera_model), intent(in) :: model
    integer, intent(out) :: vocab
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: v
    call begin_call()
    v = 0
    call finish_call(c_model_vocab(model%ptr, v), ierr)
    vocab = int(v)
  end subroutine

  !> Collective over the mesh: a decoder's logits(vocab, seq, batch) for the token ids
  !> ids(seq, batch) (0-based token ids, as in the data; column-major, so the memory is
  !> C's ids[batch][seq] and logits[batch][seq][vocab]), whole on every rank. Every rank
  !> of a tp group passes the same ids.
  subroutine tessera_model_logits(model, ids, logits, ierr)
    type(tessera_model), intent(inout) :: model
    integer(int64), intent(in), target :: ids(:, :)
    real(real32), intent(inout), target :: logits(:, :, :)
    integer, intent(out), optional :: ierr
    if (.not. is_contiguous(ids)) then
      call fail_local(not_contiguous('tessera_model_logits', 'ids'), ierr)
      return
    end if
    if (.not. is_contiguous(logits)) then
      call fail_local(not_contiguous('tessera_model_logits', 'logits'), ierr)
      return
    end if
    if (size(logits, 2) /= size(ids, 1) .or. size(logits, 3) /= size(ids, 2)) then
      call fail_local('tessera_model_logits: logits(vocab, seq, batch) does not match ids(seq, batch)', ierr)
      return
    end if
    call begin_call()
    call finish_call(c_model_logits(model%ptr, c_loc(ids), int(size(ids, 2), c_int64_t), &
                                    int(size(ids, 1), c_int64_t), c_loc(logits), &
                                    int(size(logits, 1), c_int64_t)), ierr)
  end subroutine

  ! ---------------------------------------------------------------------------------
  ! Procedures that keep the array's address after they return: halo fields and
  ! checkpoint arrays, real32 and real64, any rank.
  !
  ! They take the array as an INTENT(IN) POINTER (the values may change, the
  ! association not), so the actual must have TARGET or be a pointer, and the dummy is
  ! associated with the actual itself: no copy. An ordinary dummy (even an assumed-rank
  ! TARGET one, even ASYNCHRONOUS) is handed a contiguous temporary copy by gfortran (12
  ! at least) when the actual is a component of an array of derived type such as pts%u,
  ! or a pointer associated with one; is_contiguous() then says .true., c_loc() is the
  ! temporary's address, and tessera would keep it and fill (halo) or read and write
  ! (checkpoint) it after it is gone, with no error. (BIND(C) procedures get no copy
  ! either, but gfortran 12 then rewrites the descriptor of an allocatable pts in place
  ! to point at the component, and pts is corrupt after the call.) On the pointer dummy
  ! gfortran's is_contiguous() still says .true. for pts%u, so describe_kept_* asks the
  ! runtime's CFI_is_contiguous() as well, which reads the memory strides.
  ! ---------------------------------------------------------------------------------

  ! describe_* for a pointer dummy: the extents of `a` (a scalar as one element); false
  ! (and the error reported) when `a` is not contiguous or has too many dims.
  logical function describe_kept_r32(a, s, where, arg, ierr) result(ok)
    real(real32), intent(in), pointer :: a(..)
    integer(c_int64_t), intent(out) :: s(MAX_DIMS)
    character(len=*), intent(in) :: where, arg
    integer, intent(out), optional :: ierr
    s = 1
    ok = .false.
    if (rank(a) > MAX_DIMS) then
      call fail_local(where // ": argument '" // arg // "' has more than 8 dims", ierr)
      return
    end if
    if (.not. is_contiguous(a)) then
      call fail_local(not_contiguous(where, arg), ierr)
      return
    end if
    if (rank(a) > 0) then
      ! (Rank 0 is no array for CFI_is_contiguous, and an empty array may have no address.)
      if (size(a) > 0) then
        if (c_cfi_is_contiguous(a) /= 1) then
          call fail_local(not_contiguous(where, arg), ierr)
          return
        end if
      end if
      s(1:rank(a)) = shape(a, kind=c_int64_t)
    end if
    ok = .true.
  end function

  logical function describe_kept_r64(a, s, where, arg, ierr) result(ok)
    real(real64), intent(in), pointer :: a(..)
    integer(c_int64_t), intent(out) :: s(MAX_DIMS)
    character(len=*), intent(in) :: where, arg
    integer, intent(out), optional :: ierr
    s = 1
    ok = .false.
    if (rank(a) > MAX_DIMS) then
      call fail_local(where // ": argument '" // arg // "' has more than 8 dims", ierr)
      return
    end if
    if (.not. is_contiguous(a)) then
      call fail_local(not_contiguous(where, arg), ierr)
      return
    end if
    if (rank(a) > 0) then
      ! (Rank 0 is no array for CFI_is_contiguous, and an empty array may have no address.)
      if (size(a) > 0) then
        if (c_cfi_is_contiguous(a) /= 1) then
          call fail_local(not_contiguous(where, arg), ierr)
          return
        end if
      end if
      s(1:rank(a)) = shape(a, kind=c_int64_t)
    end if
    ok = .true.
  end function

  ! A field rejected here is still a registration attempt for the C side: a call with a
  ! null data pointer fails there without registering anything, and (like any
  ! tessera_halo_add_field call) makes the next exchange agree the field count on every
  ! rank, so a field rejected on some ranks only is an error on every rank at that
  ! exchange instead of a hang (docs/c-api.md, "Failure behaviour"). The Fortran
  ! message stays the one tessera_last_error() returns.
  subroutine halo_field_rejected(halo)
    type(tessera_halo), intent(in) :: halo
    integer(c_int64_t) :: s(1)
    integer(c_int) :: index, ignored
    s = 0
    index = -1
    ignored = c_halo_add_field(halo%ptr, c_null_ptr, TESSERA_F32, TESSERA_ORDER_FORTRAN, 1_c_int, s, index)
  end subroutine

  subroutine halo_add_field_r32(halo, field, ierr)
    type(tessera_halo), intent(inout) :: halo
    real(real32), intent(in), pointer :: field(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS)
    integer(c_int) :: index
    if (.not. describe_kept_r32(field, s, 'tessera_halo_add_field', 'field', ierr)) then
      call halo_field_rejected(halo)
      return
    end if
    call begin_call()
    call finish_call(c_halo_add_field(halo%ptr, c_loc(field), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                      int(rank(field), c_int), s, index), ierr)
  end subroutine

  subroutine halo_add_field_r64(halo, field, ierr)
    type(tessera_halo), intent(inout) :: halo
    real(real64), intent(in), pointer :: field(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS)
    integer(c_int) :: index
    if (.not. describe_kept_r64(field, s, 'tessera_halo_add_field', 'field', ierr)) then
      call halo_field_rejected(halo)
      return
    end if
    call begin_call()
    call finish_call(c_halo_add_field(halo%ptr, c_loc(field), TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                      int(rank(field), c_int), s, index), ierr)
  end subroutine

  !> Adds a named array: this rank's block of shape shape(array) at 0-based
  !> `local_offset` in an array of `global_shape`, both in Fortran order. A scalar is a
  !> 1-element array (global_shape [1], local_offset [0]).
  subroutine checkpoint_add_array_r32(checkpoint, name, array, global_shape, local_offset, placement, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    character(len=*), intent(in) :: name
    real(real32), intent(in), pointer :: array(..)
    integer, intent(in) :: global_shape(:), local_offset(:)
    character(len=*), intent(in) :: placement
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS), o(MAX_DIMS)
    integer :: n
    if (.not. describe_kept_r32(array, s, "tessera_checkpoint_add_array: array '" // trim(name) // "'", 'array', &
                                ierr)) return
    n = max(rank(array), 1)
    if (size(global_shape) /= n .or. size(local_offset) /= n) then
      call fail_local("tessera_checkpoint_add_array: array '" // trim(name) // &
                      "': global_shape and local_offset need one entry per dim of the array", ierr)
      return
    end if
    g = 0; o = 0
    g(1:n) = int(global_shape, c_int64_t)
    o(1:n) = int(local_offset, c_int64_t)
    call begin_call()
    call finish_call(c_checkpoint_add_array(checkpoint%ptr, to_c(name), c_loc(array), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                            int(n, c_int), g, o, s, to_c(placement)), ierr)
  end subroutine

  subroutine checkpoint_add_array_r64(checkpoint, name, array, global_shape, local_offset, placement, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    character(len=*), intent(in) :: name
    real(real64), intent(in), pointer :: array(..)
    integer, intent(in) :: global_shape(:), local_offset(:)
    character(len=*), intent(in) :: placement
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS), o(MAX_DIMS)
    integer :: n
    if (.not. describe_kept_r64(array, s, "tessera_checkpoint_add_array: array '" // trim(name) // "'", 'array', &
                                ierr)) return
    n = max(rank(array), 1)
    if (size(global_shape) /= n .or. size(local_offset) /= n) then
      call fail_local("tessera_checkpoint_add_array: array '" // trim(name) // &
                      "': global_shape and local_offset need one entry per dim of the array", ierr)
      return
    end if
    g = 0; o = 0
    g(1:n) = int(global_shape, c_int64_t)
    o(1:n) = int(local_offset, c_int64_t)
    call begin_call()
    call finish_call(c_checkpoint_add_array(checkpoint%ptr, to_c(name), c_loc(array), TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                            int(n, c_int), g, o, s, to_c(placement)), ierr)
  end subroutine

  !> Adds the interior of a padded halo field; global shape, offset and placement come
  !> from the halo's decomposition.
  subroutine checkpoint_add_field_r32(checkpoint, name, halo, field, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    character(len=*), intent(in) :: name
    type(tessera_halo), intent(in) :: halo
    real(real32), intent(in), pointer :: field(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS)
    if (.not. describe_kept_r32(field, s, "tessera_checkpoint_add_field: field '" // trim(name) // "'", 'field', &
                                ierr)) return
    call begin_call()
    call finish_call(c_checkpoint_add_halo_field(checkpoint%ptr, to_c(name), halo%ptr, c_loc(field), TESSERA_F32, &
                                                 TESSERA_ORDER_FORTRAN, int(rank(field), c_int), s), ierr)
  end subroutine

  subroutine checkpoint_add_field_r64(checkpoint, name, halo, field, ierr)
    type(tessera_checkpoint), intent(inout) :: checkpoint
    character(len=*), intent(in) :: name
    type(tessera_halo), intent(in) :: halo
    real(real64), intent(in), pointer :: field(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS)
    if (.not. describe_kept_r64(field, s, "tessera_checkpoint_add_field: field '" // trim(name) // "'", 'field', &
                                ierr)) return
    call begin_call()
    call finish_call(c_checkpoint_add_halo_field(checkpoint%ptr, to_c(name), halo%ptr, c_loc(field), TESSERA_F64, &
                                                 TESSERA_ORDER_FORTRAN, int(rank(field), c_int), s), ierr)
  end subroutine

  ! ---------------------------------------------------------------------------------
  ! Procedures that use an array only while they run, real32 and real64, any rank (assumed-rank dummies).
  ! ---------------------------------------------------------------------------------

  subroutine halo_gather_r32(halo, field, global, root, ierr)
    type(tessera_halo), intent(in) :: halo
    real(real32), intent(in), target :: field(..)
    real(real32), intent(inout), target :: global(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r32(field, s, 'tessera_halo_gather', 'field', ierr)) return
    if (.not. describe_r32(global, g, 'tessera_halo_gather', 'global', ierr)) return
    call begin_call()
    call finish_call(c_halo_gather(halo%ptr, c_loc(field), address_r32(global), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                   int(rank(field), c_int), s, int(root, c_int)), ierr)
  end subroutine

  subroutine halo_scatter_r32(halo, global, field, root, ierr)
    type(tessera_halo), intent(in) :: halo
    real(real32), intent(in), target :: global(..)
    real(real32), intent(inout), target :: field(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r32(field, s, 'tessera_halo_scatter', 'field', ierr)) return
    if (.not. describe_r32(global, g, 'tessera_halo_scatter', 'global', ierr)) return
    call begin_call()
    call finish_call(c_halo_scatter(halo%ptr, address_r32(global), c_loc(field), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                    int(rank(field), c_int), s, int(root, c_int)), ierr)
  end subroutine

  subroutine decomp_scatter_r32(decomp, global, local, root, ierr)
    type(tessera_decomp), intent(in) :: decomp
    real(real32), intent(in), target :: global(..)
    real(real32), intent(inout), target :: local(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r32(local, s, 'tessera_decomp_scatter', 'local', ierr)) return
    if (.not. describe_r32(global, g, 'tessera_decomp_scatter', 'global', ierr)) return
    call begin_call()
    call finish_call(c_decomp_scatter(decomp%ptr, address_r32(global), c_loc(local), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                      int(rank(local), c_int), s, int(root, c_int)), ierr)
  end subroutine

  !> Collective: the sum over every rank of its box `local` (lon, lat, ...), exact and
  !> rounded once: the same bits at every decomposition (docs/domain.md).
  subroutine decomp_global_sum_r32(decomp, local, total, ierr)
    type(tessera_decomp), intent(in) :: decomp
    real(real32), intent(in), target :: local(..)
    real(real64), intent(out) :: total
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS)
    real(c_double) :: t
    total = 0
    if (.not. describe_r32(local, s, 'tessera_decomp_global_sum', 'local', ierr)) return
    call begin_call()
    t = 0
    call finish_call(c_decomp_global_sum(decomp%ptr, c_loc(local), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                         int(rank(local), c_int), s, t), ierr)
    total = real(t, real64)
  end subroutine

  subroutine decomp_gather_r32(decomp, local, global, root, ierr)
    type(tessera_decomp), intent(in) :: decomp
    real(real32), intent(in), target :: local(..)
    real(real32), intent(inout), target :: global(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r32(local, s, 'tessera_decomp_gather', 'local', ierr)) return
    if (.not. describe_r32(global, g, 'tessera_decomp_gather', 'global', ierr)) return
    call begin_call()
    call finish_call(c_decomp_gather(decomp%ptr, c_loc(local), address_r32(global), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                     int(rank(local), c_int), s, int(root, c_int)), ierr)
  end subroutine

  ! The extents of `a` (a scalar as one element); false (and the error reported) when it
  ! is not contiguous or has too many dims. `where` names the procedure, `arg` the dummy
  ! argument. A strided section arrives as itself and is rejected; pts%u may arrive as a
  ! compiler's contiguous copy (gfortran), which is correct for these procedures, since
  ! they use the array only while they run (see describe_kept_* for the others).
  logical function describe_r32(a, s, where, arg, ierr) result(ok)
    real(real32), intent(in), target :: a(..)
    integer(c_int64_t), intent(out) :: s(MAX_DIMS)
    character(len=*), intent(in) :: where, arg
    integer, intent(out), optional :: ierr
    s = 1
    ok = .false.
    if (rank(a) > MAX_DIMS) then
      call fail_local(where // ": argument '" // arg // "' has more than 8 dims", ierr)
      return
    end if
    if (.not. is_contiguous(a)) then
      call fail_local(not_contiguous(where, arg), ierr)
      return
    end if
    if (rank(a) > 0) s(1:rank(a)) = shape(a, kind=c_int64_t)
    ok = .true.
  end function

  ! c_loc of a non-empty array, a null pointer for an empty one (e.g. the global array
  ! of a gather on a rank that is not the root).
  type(c_ptr) function address_r32(a) result(p)
    real(real32), intent(in), target :: a(..)
    p = c_null_ptr
    if (size(a) > 0) p = c_loc(a)
  end function

  subroutine halo_gather_r64(halo, field, global, root, ierr)
    type(tessera_halo), intent(in) :: halo
    real(real64), intent(in), target :: field(..)
    real(real64), intent(inout), target :: global(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r64(field, s, 'tessera_halo_gather', 'field', ierr)) return
    if (.not. describe_r64(global, g, 'tessera_halo_gather', 'global', ierr)) return
    call begin_call()
    call finish_call(c_halo_gather(halo%ptr, c_loc(field), address_r64(global), TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                   int(rank(field), c_int), s, int(root, c_int)), ierr)
  end subroutine

  subroutine halo_scatter_r64(halo, global, field, root, ierr)
    type(tessera_halo), intent(in) :: halo
    real(real64), intent(in), target :: global(..)
    real(real64), intent(inout), target :: field(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r64(field, s, 'tessera_halo_scatter', 'field', ierr)) return
    if (.not. describe_r64(global, g, 'tessera_halo_scatter', 'global', ierr)) return
    call begin_call()
    call finish_call(c_halo_scatter(halo%ptr, address_r64(global), c_loc(field), TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                    int(rank(field), c_int), s, int(root, c_int)), ierr)
  end subroutine

  subroutine decomp_scatter_r64(decomp, global, local, root, ierr)
    type(tessera_decomp), intent(in) :: decomp
    real(real64), intent(in), target :: global(..)
    real(real64), intent(inout), target :: local(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r64(local, s, 'tessera_decomp_scatter', 'local', ierr)) return
    if (.not. describe_r64(global, g, 'tessera_decomp_scatter', 'global', ierr)) return
    call begin_call()
    call finish_call(c_decomp_scatter(decomp%ptr, address_r64(global), c_loc(local), TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                      int(rank(local), c_int), s, int(root, c_int)), ierr)
  end subroutine

  subroutine decomp_global_sum_r64(decomp, local, total, ierr)
    type(tessera_decomp), intent(in) :: decomp
    real(real64), intent(in), target :: local(..)
    real(real64), intent(out) :: total
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS)
    real(c_double) :: t
    total = 0
    if (.not. describe_r64(local, s, 'tessera_decomp_global_sum', 'local', ierr)) return
    call begin_call()
    t = 0
    call finish_call(c_decomp_global_sum(decomp%ptr, c_loc(local), TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                         int(rank(local), c_int), s, t), ierr)
    total = real(t, real64)
  end subroutine

  subroutine decomp_gather_r64(decomp, local, global, root, ierr)
    type(tessera_decomp), intent(in) :: decomp
    real(real64), intent(in), target :: local(..)
    real(real64), intent(inout), target :: global(..)
    integer, intent(in) :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), g(MAX_DIMS)
    if (.not. describe_r64(local, s, 'tessera_decomp_gather', 'local', ierr)) return
    if (.not. describe_r64(global, g, 'tessera_decomp_gather', 'global', ierr)) return
    call begin_call()
    call finish_call(c_decomp_gather(decomp%ptr, c_loc(local), address_r64(global), TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                     int(rank(local), c_int), s, int(root, c_int)), ierr)
  end subroutine

  ! The extents of `a` (a scalar as one element); false (and the error reported) when it
  ! is not contiguous or has too many dims. `where` names the procedure, `arg` the dummy
  ! argument. A strided section arrives as itself and is rejected; pts%u may arrive as a
  ! compiler's contiguous copy (gfortran), which is correct for these procedures, since
  ! they use the array only while they run (see describe_kept_* for the others).
  logical function describe_r64(a, s, where, arg, ierr) result(ok)
    real(real64), intent(in), target :: a(..)
    integer(c_int64_t), intent(out) :: s(MAX_DIMS)
    character(len=*), intent(in) :: where, arg
    integer, intent(out), optional :: ierr
    s = 1
    ok = .false.
    if (rank(a) > MAX_DIMS) then
      call fail_local(where // ": argument '" // arg // "' has more than 8 dims", ierr)
      return
    end if
    if (.not. is_contiguous(a)) then
      call fail_local(not_contiguous(where, arg), ierr)
      return
    end if
    if (rank(a) > 0) s(1:rank(a)) = shape(a, kind=c_int64_t)
    ok = .true.
  end function

  ! c_loc of a non-empty array, a null pointer for an empty one (e.g. the global array
  ! of a gather on a rank that is not the root).
  type(c_ptr) function address_r64(a) result(p)
    real(real64), intent(in), target :: a(..)
    p = c_null_ptr
    if (size(a) > 0) p = c_loc(a)
  end function

  ! ---------------------------------------------------------------------------------
  ! Coupling: a model on fewer ranks than the code (docs/coupling.md)
  ! ---------------------------------------------------------------------------------

  ! The C arguments of a model-rank choice: nmodel = 0 and no list: one per GPU per node;
  ! no list: nmodel ranks spread evenly; a list: those code ranks (0-based).
  subroutine model_rank_choice(nmodel, model_ranks, n, list)
    integer, intent(in) :: nmodel
    integer, intent(in), optional :: model_ranks(:)
    integer(c_int), intent(out) :: n
    integer(c_int), allocatable, intent(out) :: list(:)
    n = int(nmodel, c_int)
    if (present(model_ranks)) then
      n = int(size(model_ranks), c_int)
      allocate(list(max(1, size(model_ranks))))
      list = 0
      list(1:size(model_ranks)) = int(model_ranks, c_int)
    end if
  end subroutine

  !> Collective over the decomposition's communicator: a redistribution plan between the
  !> decomposition and a model on `nmodel` ranks (0: one per GPU per node), or on the
  !> code ranks listed in `model_ranks` (0-based; nmodel is then ignored). The model's
  !> grid: grid_lat x grid_lon (default: latitude bands), each box on `replicas` ranks.
  subroutine tessera_redist_create(redist, decomp, nmodel, model_ranks, grid_lat, grid_lon, replicas, ierr)
    type(tessera_redist), intent(inout) :: redist
    type(tessera_decomp), intent(in) :: decomp
    integer, intent(in) :: nmodel
    integer, intent(in), optional, target :: model_ranks(:)
    integer, intent(in), optional :: grid_lat, grid_lon, replicas
    integer, intent(out), optional :: ierr
    integer(c_int) :: n, glat, glon, reps
    integer(c_int), allocatable, target :: list(:)
    type(c_ptr) :: p
    call begin_call()
    call model_rank_choice(nmodel, model_ranks, n, list)
    p = c_null_ptr
    if (allocated(list)) p = c_loc(list)
    glat = 0; glon = 0; reps = 1
    if (present(grid_lat)) glat = int(grid_lat, c_int)
    if (present(grid_lon)) glon = int(grid_lon, c_int)
    if (present(replicas)) reps = int(replicas, c_int)
    call finish_call(c_redist_create(decomp%ptr, n, p, glat, glon, reps, redist%ptr), ierr)
  end subroutine

  subroutine tessera_redist_destroy(redist, ierr)
    type(tessera_redist), intent(inout) :: redist
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_redist_destroy(redist%ptr), ierr)
  end subroutine

  subroutine tessera_redist_model_size(redist, size, ierr)
    type(tessera_redist), intent(in) :: redist
    integer, intent(out) :: size
    integer, intent(out), optional :: ierr
    integer(c_int) :: s
    call begin_call()
    s = 0
    call finish_call(c_redist_model_size(redist%ptr, s), ierr)
    size = int(s)
  end subroutine

  !> This rank's 0-based model rank, -1 on a rank that runs no model.
  subroutine tessera_redist_model_rank(redist, rank, ierr)
    type(tessera_redist), intent(in) :: redist
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: r
    call begin_call()
    r = -1
    call finish_call(c_redist_model_rank(redist%ptr, r), ierr)
    rank = int(r)
  end subroutine

  !> This model rank's box: 1-based first global indices and counts (counts 0 on a rank
  !> that runs no model). Declare model arrays m(lon_count, lat_count[, levels...]).
  subroutine tessera_redist_model_box(redist, lat_first, lat_count, lon_first, lon_count, ierr)
    type(tessera_redist), intent(in) :: redist
    integer, intent(out) :: lat_first, lat_count, lon_first, lon_count
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: a, b, c, d
    call begin_call()
    a = -1; b = 0; c = -1; d = 0
    call finish_call(c_redist_model_box(redist%ptr, a, b, c, d), ierr)
    lat_first = int(a) + 1; lat_count = int(b); lon_first = int(c) + 1; lon_count = int(d)
  end subroutine

  !> The model ranks' communicator (owned by tessera: do not free); MPI_COMM_NULL's
  !> handle on a rank that runs no model.
  subroutine redist_model_comm_int(redist, comm, ierr)
    type(tessera_redist), intent(in) :: redist
    integer, intent(out) :: comm
    integer, intent(out), optional :: ierr
    integer(c_int) :: c
    call begin_call()
    c = 0
    call finish_call(c_redist_model_comm_f(redist%ptr, c), ierr)
    comm = int(c)
  end subroutine

  ! A pair rejected here still counts as a registration for the C side (as for the halo:
  ! the next transfer then agrees on the field count, so no rank is left waiting).
  subroutine redist_field_rejected(redist)
    type(tessera_redist), intent(in) :: redist
    integer(c_int64_t) :: s(1)
    integer(c_int) :: index, ignored
    s = 0
    index = -1
    ignored = c_redist_add_field(redist%ptr, c_null_ptr, c_null_ptr, TESSERA_F32, TESSERA_ORDER_FORTRAN, 1_c_int, &
                                 s, index)
  end subroutine

  !> Local: registers a pair, the code's array code(lon, lat[, levels...]) over this
  !> rank's box and the model's model(lon, lat[, levels...]) over its model box, with the
  !> same levels (a zero-size array on a rank that runs no model). Both are used by
  !> address until cleared: give them TARGET and keep them allocated.
  subroutine redist_add_field_r32(redist, code, model, ierr)
    type(tessera_redist), intent(inout) :: redist
    real(real32), intent(in), pointer :: code(..), model(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), m(MAX_DIMS)
    integer(c_int) :: index
    type(c_ptr) :: p
    if (.not. describe_kept_r32(code, s, 'tessera_redist_add_field', 'code', ierr) .or. &
        .not. describe_kept_r32(model, m, 'tessera_redist_add_field', 'model', ierr)) then
      call redist_field_rejected(redist)
      return
    end if
    p = c_null_ptr
    if (size(model) > 0) p = c_loc(model)
    call begin_call()
    call finish_call(c_redist_add_field(redist%ptr, c_loc(code), p, TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                        int(rank(code), c_int), s, index), ierr)
  end subroutine

  subroutine redist_add_field_r64(redist, code, model, ierr)
    type(tessera_redist), intent(inout) :: redist
    real(real64), intent(in), pointer :: code(..), model(..)
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), m(MAX_DIMS)
    integer(c_int) :: index
    type(c_ptr) :: p
    if (.not. describe_kept_r64(code, s, 'tessera_redist_add_field', 'code', ierr) .or. &
        .not. describe_kept_r64(model, m, 'tessera_redist_add_field', 'model', ierr)) then
      call redist_field_rejected(redist)
      return
    end if
    p = c_null_ptr
    if (size(model) > 0) p = c_loc(model)
    call begin_call()
    call finish_call(c_redist_add_field(redist%ptr, c_loc(code), p, TESSERA_F64, TESSERA_ORDER_FORTRAN, &
                                        int(rank(code), c_int), s, index), ierr)
  end subroutine

  subroutine tessera_redist_clear_fields(redist, ierr)
    type(tessera_redist), intent(inout) :: redist
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_redist_clear_fields(redist%ptr), ierr)
  end subroutine

  subroutine tessera_redist_num_fields(redist, count, ierr)
    type(tessera_redist), intent(in) :: redist
    integer, intent(out) :: count
    integer, intent(out), optional :: ierr
    integer(c_int) :: n
    call begin_call()
    n = 0
    call finish_call(c_redist_num_fields(redist%ptr, n), ierr)
    count = int(n)
  end subroutine

  !> Collective: every registered code array's box into the model arrays.
  subroutine tessera_redist_to_model(redist, ierr)
    type(tessera_redist), intent(inout) :: redist
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_redist_to_model(redist%ptr), ierr)
  end subroutine

  !> Collective: the model arrays back into the code arrays.
  subroutine tessera_redist_to_code(redist, ierr)
    type(tessera_redist), intent(inout) :: redist
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_redist_to_code(redist%ptr), ierr)
  end subroutine

  subroutine tessera_redist_start_to_model(redist, ierr)
    type(tessera_redist), intent(inout) :: redist
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_redist_start_to_model(redist%ptr), ierr)
  end subroutine

  subroutine tessera_redist_start_to_code(redist, ierr)
    type(tessera_redist), intent(inout) :: redist
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_redist_start_to_code(redist%ptr), ierr)
  end subroutine

  subroutine tessera_redist_finish(redist, ierr)
    type(tessera_redist), intent(inout) :: redist
    integer, intent(out), optional :: ierr
    call begin_call()
    call finish_call(c_redist_finish(redist%ptr), ierr)
  end subroutine

  subroutine tessera_redist_in_flight(redist, in_flight, ierr)
    type(tessera_redist), intent(in) :: redist
    logical, intent(out) :: in_flight
    integer, intent(out), optional :: ierr
    integer(c_int) :: flag
    call begin_call()
    flag = 0
    call finish_call(c_redist_in_flight(redist%ptr, flag), ierr)
    in_flight = flag /= 0
  end subroutine

  !> Collective over the decomposition's communicator: the model stored at `path` run on
  !> `nmodel` ranks (0: one per GPU per node) or the listed code ranks, `tensor`-parallel
  !> (default 1). tessera_model_predict / _forward then take x(lon, lat, C[, B]) over this
  !> rank's box of the decomposition on every rank (tessera_model_box).
  subroutine tessera_model_load_coupled(model, decomp, path, nmodel, model_ranks, tensor, ierr)
    type(tessera_model), intent(inout) :: model
    type(tessera_decomp), intent(in) :: decomp
    character(len=*), intent(in) :: path
    integer, intent(in) :: nmodel
    integer, intent(in), optional :: model_ranks(:)
    integer, intent(in), optional :: tensor
    integer, intent(out), optional :: ierr
    integer(c_int) :: n, t
    integer(c_int), allocatable, target :: list(:)
    type(c_ptr) :: p
    call begin_call()
    call model_rank_choice(nmodel, model_ranks, n, list)
    p = c_null_ptr
    if (allocated(list)) p = c_loc(list)
    t = 1
    if (present(tensor)) t = int(tensor, c_int)
    call finish_call(c_model_load_coupled(decomp%ptr, to_c(path), n, p, t, model%ptr), ierr)
  end subroutine

  !> Collective: one online training step of a coupled model on normalised fields in the
  !> code's layout (input and target of one shape, (nlon, lat, channels[, B]) over this
  !> rank's box): forward, latitude-weighted MSE, backward, gradient sync and an optimizer
  !> step ('adamw' or 'sgd', kept from the first step) on the model ranks; `loss` is the
  !> step's loss, the same on every rank.
  subroutine tessera_model_train_step(model, input, target, optimizer, lr, loss, ierr)
    type(tessera_model), intent(inout) :: model
    real(real32), intent(in), target :: input(..), target(..)
    character(len=*), intent(in) :: optimizer
    real(real64), intent(in) :: lr
    real(real64), intent(out) :: loss
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: s(MAX_DIMS), t(MAX_DIMS)
    real(c_double) :: value
    loss = 0
    if (.not. describe_r32(input, s, 'tessera_model_train_step', 'input', ierr)) return
    if (.not. describe_r32(target, t, 'tessera_model_train_step', 'target', ierr)) return
    if (any(s /= t) .or. rank(input) /= rank(target)) then
      call fail_local('tessera_model_train_step: target and input have different shapes', ierr)
      return
    end if
    call begin_call()
    value = 0
    call finish_call(c_model_train_step(model%ptr, c_loc(input), c_loc(target), TESSERA_F32, TESSERA_ORDER_FORTRAN, &
                                        int(rank(input), c_int), s, to_c(optimizer), real(lr, c_double), value), ierr)
    loss = real(value, real64)
  end subroutine

  !> How many ranks run the model and this rank's 0-based place among them (-1: none).
  subroutine tessera_model_coupling(model, model_size, model_rank, ierr)
    type(tessera_model), intent(in) :: model
    integer, intent(out) :: model_size, model_rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: a, b
    call begin_call()
    a = 0; b = -1
    call finish_call(c_model_coupling(model%ptr, a, b), ierr)
    model_size = int(a); model_rank = int(b)
  end subroutine

#ifdef TESSERA_HAVE_MPI_F08
  ! ---------------------------------------------------------------------------------
  ! The type(MPI_Comm) forms (mpi_f08): the same calls through the handle's MPI_VAL.
  ! ---------------------------------------------------------------------------------

  subroutine mesh_create_f08(mesh, comm, data, tensor, domain, ierr)
    type(tessera_mesh), intent(inout) :: mesh
    type(MPI_Comm), intent(in) :: comm
    integer, intent(in) :: data, tensor, domain
    integer, intent(out), optional :: ierr
    call mesh_create_int(mesh, comm%MPI_VAL, data, tensor, domain, ierr)
  end subroutine

  subroutine mesh_create_from_file_f08(mesh, comm, path, ierr)
    type(tessera_mesh), intent(inout) :: mesh
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: path
    integer, intent(out), optional :: ierr
    call mesh_create_from_file_int(mesh, comm%MPI_VAL, path, ierr)
  end subroutine

  subroutine mesh_comm_f08(mesh, dim, comm, ierr)
    type(tessera_mesh), intent(in) :: mesh
    integer, intent(in) :: dim
    type(MPI_Comm), intent(out) :: comm
    integer, intent(out), optional :: ierr
    call mesh_comm_int(mesh, dim, comm%MPI_VAL, ierr)
  end subroutine

  subroutine decomp_create_f08(decomp, comm, nlat, nlon, grid_lat, grid_lon, ierr)
    type(tessera_decomp), intent(inout) :: decomp
    type(MPI_Comm), intent(in) :: comm
    integer, intent(in) :: nlat, nlon, grid_lat, grid_lon
    integer, intent(out), optional :: ierr
    call decomp_create_int(decomp, comm%MPI_VAL, nlat, nlon, grid_lat, grid_lon, ierr)
  end subroutine

  subroutine decomp_comm_f08(decomp, comm, ierr)
    type(tessera_decomp), intent(in) :: decomp
    type(MPI_Comm), intent(out) :: comm
    integer, intent(out), optional :: ierr
    call decomp_comm_int(decomp, comm%MPI_VAL, ierr)
  end subroutine

  subroutine redist_model_comm_f08(redist, comm, ierr)
    type(tessera_redist), intent(in) :: redist
    type(MPI_Comm), intent(out) :: comm
    integer, intent(out), optional :: ierr
    call redist_model_comm_int(redist, comm%MPI_VAL, ierr)
  end subroutine
#endif

end module tessera
