! Decoder inference from Fortran (tessera_model_logits): the checkpoints and reference
! logits that test_capi_decoder writes (its fixture, at the same rank count), loaded at
! tp N (bit-identical to the model that saved it) and at tp 1 with ddp replicas
! (bit-identical to the serial model); ids(seq, batch) and logits(vocab, seq, batch) in
! column-major order are C's ids[batch][seq] and logits[batch][seq][vocab]. Also the
! wrong-type error on a decoder (tessera_model_predict) and a mismatched logits shape.
program test_fortran_decoder
  use mpi
  use tessera
  use tessera_test_support
  use, intrinsic :: iso_fortran_env, only: real32, int64
  implicit none

  integer, parameter :: batch = 2, seq = 5
  integer :: total, nranks, ierr
  character(len=256) :: dir

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, dir)
  write(dir, '(a,a,i0)') trim(dir), '/capi_decoder_np', nranks

  call check_model(trim(dir) // '/gqa', 11)
  call check_model(trim(dir) // '/tied', 10)

  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) write(*, '(a,i0,a)') 'test_fortran_decoder: ', total, ' failure(s)'
  call MPI_Finalize(ierr)
  if (total /= 0) stop 1

contains

  subroutine check_model(root, nvocab)
    character(len=*), intent(in) :: root
    integer, intent(in) :: nvocab
    integer(int64) :: ids(seq, batch)
    real(real32) :: serial(nvocab, seq, batch), trained(nvocab, seq, batch), logits(nvocab, seq, batch)
    real(real32) :: wrong(nvocab, seq + 1, batch), field(8, 2, 1, 1)
    type(tessera_mesh) :: mesh
    type(tessera_model) :: model
    integer :: unit, tensor, mode, type, vocab, status, i
    open(newunit=unit, file=root // '.ref', access='stream', form='unformatted', status='old', action='read')
    read(unit) ids, serial, trained
    close(unit)
    do i = 1, 2
      tensor = merge(nranks, 1, i == 1)
      mode = merge(TESSERA_DATA_DDP, TESSERA_DATA_NONE, tensor == 1 .and. nranks > 1)
      call tessera_mesh_create(mesh, MPI_COMM_WORLD, mode, tensor, 1)
      call tessera_model_load(model, mesh, root)
      call tessera_mesh_destroy(mesh)
      call tessera_model_type(model, type)
      call check(type == TESSERA_MODEL_DECODER, 'tessera_model_type is TESSERA_MODEL_DECODER')
      call tessera_model_vocab(model, vocab)
      call check(vocab == nvocab, 'tessera_model_vocab')
      logits = -1
      call tessera_model_logits(model, ids, logits)
      if (tensor == 1) then
        call check(all(logits == serial), root // ': logits at tp 1 equal the serial model''s')
      else
        call check(all(logits == trained), root // ': logits at tp N equal the saving model''s')
      end if
      call tessera_model_logits(model, ids, wrong, status)
      call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'mismatched logits shape')
      call tessera_model_predict(model, field, field, status)
      call check(status == TESSERA_ERR_INVALID_ARGUMENT, 'tessera_model_predict on a decoder')
      call check(index(tessera_last_error(), 'decoder') > 0, 'the error names the decoder')
      call tessera_model_destroy(model)
    end do
  end subroutine

end program
