// Error hierarchy and check macros.

#include <gtest/gtest.h>
#include <mpi.h>

#include "tessera/check.hpp"
#include "tessera/error.hpp"

using namespace tessera;

TEST(Error, CodesAndTypesRoundTripThroughThrowError) {
  const ErrorCode codes[] = {ErrorCode::invalid_argument, ErrorCode::config, ErrorCode::shape,
                             ErrorCode::unsupported, ErrorCode::mpi, ErrorCode::hdf5,
                             ErrorCode::cuda, ErrorCode::nccl, ErrorCode::cublas,
                             ErrorCode::io, ErrorCode::internal};
  for (ErrorCode code : codes) {
    try {
      throw_error(code, "message for " + std::string(error_code_name(code)));
      FAIL() << "throw_error returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code);
      EXPECT_EQ(std::string(e.what()), "message for " + std::string(error_code_name(code)));
    }
  }
  EXPECT_THROW(throw_error(ErrorCode::config, "x"), ConfigError);
  EXPECT_THROW(throw_error(ErrorCode::cuda, "x"), CudaError);
  EXPECT_THROW(throw_error(ErrorCode::mpi, "x"), MpiError);
  EXPECT_EQ(error_code_name(ErrorCode::hdf5), "hdf5");
}

TEST(Error, CheckThrowsTheGivenTypeAndEvaluatesOnce) {
  int evaluations = 0;
  auto condition = [&] { ++evaluations; return false; };
  try {
    TESSERA_CHECK(condition(), ShapeError, "shape of 'layers.0.weight' is wrong");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "shape of 'layers.0.weight' is wrong");
  }
  EXPECT_EQ(evaluations, 1);
  TESSERA_CHECK(true, ShapeError, "never");
}

TEST(Error, CheckMpiNamesTheCallAndMpisText) {
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_SELF, &comm), MPI_SUCCESS);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int calls = 0;
  auto bad_send = [&] {
    ++calls;
    int value = 0;
    return MPI_Send(&value, 1, MPI_INT, /*dest=*/7, 0, comm);  // rank 7 does not exist
  };
  try {
    TESSERA_CHECK_MPI(bad_send());
    FAIL() << "no throw";
  } catch (const MpiError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_error.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("`bad_send()` failed"), std::string::npos) << what;
    EXPECT_NE(what.find("MPI error"), std::string::npos) << what;
    EXPECT_EQ(e.code(), ErrorCode::mpi);
  }
  EXPECT_EQ(calls, 1);
  int size = 0;
  TESSERA_CHECK_MPI(MPI_Comm_size(comm, &size));  // success: no throw
  EXPECT_EQ(size, 1);
  MPI_Comm_free(&comm);
}
