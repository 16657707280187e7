! The step-by-step samples of docs/fortran.md (section 3) as one program, run on 2 ranks
! in a directory where runs/emulator holds a field-emulator checkpoint written by
! tessera-run (in the tests: two steps at 1 rank). Each step that declares something opens
! a BLOCK, so the guide's fragments appear here verbatim and in order.
program doc_fortran_steps
  use mpi
  use tessera
  use, intrinsic :: iso_fortran_env, only: real32, real64
  implicit none
  integer, parameter :: nlat = 18, nlon = 36, nsteps = 3
  integer :: model_comm, nranks, ierr, first(2), count(2), nlat_loc, nlon_loc, step, rank
  integer :: nchan, global_m(2), band(2), calls
  real(real64), target :: model_time

  call MPI_Init(ierr)
  call MPI_Comm_dup(MPI_COMM_WORLD, model_comm, ierr)   ! the code's own communicator
  call MPI_Comm_rank(model_comm, rank, ierr)
  model_time = 0
  calls = 0

  block
    type(tessera_mesh) :: mesh
    call MPI_Comm_size(model_comm, nranks, ierr)
    call tessera_mesh_create(mesh, model_comm, TESSERA_DATA_NONE, 1, nranks)   ! tensor 1, domain = all ranks

    block
      type(tessera_decomp) :: decomp
      call tessera_decomp_create_from_mesh(decomp, mesh, [nlon, nlat], [0, 0])   ! lon first; [0, 0]: latitude bands
      call tessera_decomp_box(decomp, first, count)          ! [lon, lat]: 1-based first indices, counts
      nlon_loc = count(1); nlat_loc = count(2)

      block
        real(real64), allocatable, target :: q(:, :)
        real(real32), allocatable, target :: c(:, :)
        type(tessera_halo) :: halo
        call tessera_halo_create(halo, decomp, [1, 1], [1, 1], .true., TESSERA_POLE_REPLICATE)
        !                                     [lon, lat] before, [lon, lat] after, periodic lon, poles
        allocate(q(0:nlon_loc+1, 0:nlat_loc+1), c(0:nlon_loc+1, 0:nlat_loc+1))
        call tessera_halo_add_field(halo, q)     ! real64
        call tessera_halo_add_field(halo, c)     ! real32, same exchange

        q = 1
        c = 2
        do step = 1, nsteps
          call tessera_halo_exchange(halo)         ! one message per neighbour for all fields
          ! ... your stencil on q(1:nlon_loc, 1:nlat_loc) reading q(0:nlon_loc+1, 0:nlat_loc+1)
        end do

        call tessera_halo_start(halo)
        call compute_interior()      ! read the interior, write nothing in q or c
        call tessera_halo_finish(halo)
        call compute_rim()

        block
          type(tessera_checkpoint) :: ck
          ! write (collective over the mesh at commit)
          call tessera_checkpoint_begin_save(ck, mesh, 'restart', step, TESSERA_LAYOUT_SHARED)
          call tessera_checkpoint_add_field(ck, 'q', halo, q)      ! the interior, at its global place
          call tessera_checkpoint_add_field(ck, 'c', halo, c)
          call tessera_checkpoint_add_array(ck, 'time', model_time, [1], [0], '')   ! a replicated scalar
          call tessera_checkpoint_commit(ck)
          call tessera_checkpoint_destroy(ck)

          ! read, at any number of ranks
          call tessera_checkpoint_begin_load(ck, mesh, 'restart')  ! root dir (latest), step dir or file
          call tessera_checkpoint_add_field(ck, 'q', halo, q)
          call tessera_checkpoint_add_field(ck, 'c', halo, c)
          call tessera_checkpoint_add_array(ck, 'time', model_time, [1], [0], '')
          call tessera_checkpoint_commit(ck)
          call tessera_checkpoint_step(ck, step)
          call tessera_checkpoint_destroy(ck)
          if (step /= nsteps + 1) call fail('the restart did not return its step')

          block
            type(tessera_model) :: model
            real(real32), allocatable, target :: x(:, :, :)
            call tessera_model_load(model, mesh, 'runs/emulator')          ! trained with tessera-run
            call tessera_model_info(model, nchan, global_m)               ! global_m = [nlon, nlat]
            call tessera_model_box(model, first, band)                     ! this rank's band, [lon, lat]
            allocate(x(band(1), band(2), nchan))                           ! (lon, lat, channel[, batch])
            call fill_from_state(x)                                        ! your model state, in physical units
            call tessera_model_predict(model, x, x)                        ! next state, in place
            if (nchan /= 3 .or. any(x /= x)) call fail('the model prediction is not as expected')
            print '(a,i0,a,i0,a,i0,a,i0,a,i0,a)', 'rank ', rank, ': restart of step ', step, ', model band of ', &
                  band(2), ' x ', band(1), ' x ', nchan, ' predicted'
            call tessera_model_destroy(model)

            call tessera_halo_destroy(halo)
            call tessera_decomp_destroy(decomp)
            call tessera_mesh_destroy(mesh)
          end block
        end block
      end block
    end block
  end block

  call MPI_Comm_free(model_comm, ierr)
  call MPI_Finalize(ierr)

contains

  subroutine compute_interior()
    calls = calls + 1
  end subroutine

  subroutine compute_rim()
    calls = calls + 1
  end subroutine

  subroutine fill_from_state(x)
    real(real32), intent(out) :: x(:, :, :)
    integer :: i, j, k
    do k = 1, size(x, 3)
      do j = 1, size(x, 2)
        do i = 1, size(x, 1)
          x(i, j, k) = real(sin(0.1 * i) * cos(0.2 * j) + k, real32)
        end do
      end do
    end do
  end subroutine

  subroutine fail(what)
    character(len=*), intent(in) :: what
    integer :: e
    print '(a)', 'doc_fortran_steps: ' // what
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine

end program
