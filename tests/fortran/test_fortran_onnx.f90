! Your own model from Fortran: tessera_model_load_onnx and tessera_model_run on the graph
! y = tanh(x W + b) that tests/onnx/make_capi_model.py writes (x float64[2, 3] in the
! graph's order, so x(3, 2) here), against the same graph by hand; a shape that is not
! the graph's is TESSERA_ERR_SHAPE, real32 arrays for an f64 graph are refused (mixed kinds
! in one call have no specific procedure: the compiler refuses them). Then the field model
! y = tanh(conv3x3(x) + b) (capi_field.onnx, x(8, 7, 2, 1) here) split over the ranks as a
! code splits its grid, the remainder latitude rows on the last rank
! (tessera_model_split_onnx), against the same model run whole; two AdamW steps of it
! (tessera_model_onnx_train_step) against the whole field trained alone, and the tuned
! graph saved (tessera_model_save_onnx) and reloaded.
program test_fortran_onnx
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, real64
  implicit none
  real(real64), parameter :: w(4, 3) = reshape([0.1d0, -0.2d0, 0.3d0, 0.4d0, 0.5d0, -0.6d0, 0.7d0, 0.8d0, &
                                                -0.9d0, 1.0d0, 0.2d0, -0.3d0], [4, 3])
  real(real64), parameter :: b(4) = [0.05d0, -0.1d0, 0.15d0, 0.2d0]
  type(tessera_mesh) :: mesh
  type(tessera_model) :: model
  real(real64) :: x(3, 2), y(4, 2), want(4, 2), wrong(2, 3)
  real(real32) :: y32(4, 2)
  real(real64) :: field(8, 7, 2, 1), whole(8, 7, 2, 1)
  real(real64), allocatable :: block(:, :, :, :), out(:, :, :, :)
  type(tessera_decomp) :: decomp
  integer :: rows, first, count, c
  character(len=512) :: path
  integer :: nranks, status, kind, i, j, k
  type(tessera_mesh) :: self
  type(tessera_model) :: alone
  real(real64) :: loss, alone_loss

  call start_test(nranks)
  call get_command_argument(1, path)
  call tessera_mesh_create(mesh, MPI_COMM_WORLD, TESSERA_DATA_DDP, 1, 1)
  call tessera_model_load_onnx(model, mesh, trim(path), status)
  call check(status == TESSERA_OK, 'load_onnx: ' // trim(path))
  call tessera_model_type(model, kind)
  call check(kind == TESSERA_MODEL_ONNX, 'type is TESSERA_MODEL_ONNX')

  do j = 1, 2
    do i = 1, 3
      x(i, j) = 0.25d0 * j - 0.3d0 * (i - 1) + 0.1d0 * rank
    end do
  end do
  ! w(j, i) is the graph's W[i][j]: y(j, n) = tanh(b(j) + sum_i x(i, n) W[i][j]).
  do j = 1, 2
    want(:, j) = tanh(b + matmul(w, x(:, j)))
  end do
  call tessera_model_run(model, x, y, status)
  call check(status == TESSERA_OK, 'run')
  call check(maxval(abs(y - want)) < 1d-14, 'y equals the graph by hand')

  call tessera_model_run(model, wrong, y, status)
  call check(status == TESSERA_ERR_SHAPE, 'an input of the wrong shape is TESSERA_ERR_SHAPE')
  ! Arrays of the other kind than the graph's are refused naming the dtype.
  call tessera_model_run(model, real(x, real32), y32, status)
  call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'real32 arrays for an f64 graph are refused')

  call tessera_model_destroy(model)

  ! The field model, whole and split.
  call get_command_argument(2, path)
  do c = 1, 2
    do j = 1, 7
      do i = 1, 8
        field(i, j, c, 1) = sin(0.3d0 * (j - 1) + 0.7d0 * (i - 1) + (c - 1))
      end do
    end do
  end do
  call tessera_model_load_onnx(model, mesh, trim(path), status)
  call check(status == TESSERA_OK, 'load_onnx: ' // trim(path))
  call tessera_model_run(model, field, whole, status)
  call check(status == TESSERA_OK, 'whole field run')
  call tessera_model_destroy(model)
  rows = 7 / nranks
  first = rank * rows + 1
  count = rows
  if (rank == nranks - 1) count = 7 - rank * rows
  call tessera_decomp_create_boxes(decomp, MPI_COMM_WORLD, [8, 7], [1, first], [8, count], status)
  call check(status == TESSERA_OK, 'decomp from boxes')
  call tessera_model_load_onnx(model, mesh, trim(path), status)
  call tessera_model_split_onnx(model, decomp, status)
  call check(status == TESSERA_OK, 'split_onnx')
  allocate(block(8, count, 2, 1), out(8, count, 2, 1))
  block = field(:, first:first + count - 1, :, :)
  call tessera_model_run(model, block, out, status)
  call check(status == TESSERA_OK, 'split field run')
  call check(maxval(abs(out - whole(:, first:first + count - 1, :, :))) < 1d-13, &
             'the split output is the whole output''s block')

  ! Fine-tuning (tessera_model_onnx_train_step): two AdamW steps of the split model on its
  ! blocks equal the whole model's on the whole field, trained alone on this rank; the
  ! saved graph reloads to the split model's weights.
  call tessera_mesh_create(self, MPI_COMM_SELF, TESSERA_DATA_NONE, 1, 1)
  call tessera_model_load_onnx(alone, self, trim(path), status)
  do k = 1, 2
    call tessera_model_onnx_train_step(alone, field, 0.5d0 * field, TESSERA_OPTIMIZER_ADAMW, 0.05d0, &
                                       alone_loss, status)
    call check(status == TESSERA_OK, 'train step of the whole field')
    call tessera_model_onnx_train_step(model, block, 0.5d0 * block, TESSERA_OPTIMIZER_ADAMW, 0.05d0, loss, status)
    call check(status == TESSERA_OK, 'train step of the split field')
    call check(abs(loss - alone_loss) <= 1d-13 * alone_loss, 'the split loss is the whole field''s')
  end do
  call tessera_model_run(alone, field, whole, status)
  call tessera_model_run(model, block, out, status)
  call check(maxval(abs(out - whole(:, first:first + count - 1, :, :))) < 1d-12, &
             'the split model trained like the whole one')
  call tessera_model_destroy(alone)
  call tessera_model_save_onnx(model, trim(path), trim(path) // '.tuned.np' // achar(48 + nranks) // '.onnx', status)
  call check(status == TESSERA_OK, 'save_onnx')
  ! Reloaded whole, its output's rows are the split model's (the same weights, up to the
  ! summation order of the whole field's convolution).
  call tessera_model_load_onnx(alone, self, trim(path) // '.tuned.np' // achar(48 + nranks) // '.onnx', status)
  call tessera_model_run(alone, field, whole, status)
  call check(status == TESSERA_OK .and. maxval(abs(out - whole(:, first:first + count - 1, :, :))) < 1d-13, &
             'the saved graph holds the tuned weights')
  call tessera_model_destroy(alone)
  call tessera_mesh_destroy(self)
  call tessera_model_destroy(model)
  call tessera_decomp_destroy(decomp)
  call tessera_mesh_destroy(mesh)
  call finish_test('test_fortran_onnx', nranks)
end program
