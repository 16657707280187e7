// TESSERA_CHECK_HDF5: one evaluation, value passed through, Hdf5Error with the stack.

#include <gtest/gtest.h>

#include <cstdio>

#include "io/hdf5_check.hpp"

using namespace tessera;

TEST(Hdf5Check, FailureThrowsWithTheCallAndTheStack) {
  detail::hdf5_errors_as_exceptions();
  int calls = 0;
  auto open_missing = [&] {
    ++calls;
    return H5Fopen("/nonexistent/tessera/ckpt.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  };
  try {
    (void)TESSERA_CHECK_HDF5(open_missing());
    FAIL() << "no throw";
  } catch (const Hdf5Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::hdf5);
    EXPECT_NE(what.find("test_hdf5_check.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("`open_missing()` failed"), std::string::npos) << what;
    EXPECT_NE(what.find("H5Fopen(): unable to open file"), std::string::npos) << what;
  }
  EXPECT_EQ(calls, 1);
}

TEST(Hdf5Check, SuccessReturnsTheValue) {
  detail::hdf5_errors_as_exceptions();
  const char* path = "test_hdf5_check.tmp.h5";
  const hid_t file = TESSERA_CHECK_HDF5(H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  EXPECT_GE(file, 0);
  const htri_t exists = TESSERA_CHECK_HDF5(H5Lexists(file, "weights", H5P_DEFAULT));
  EXPECT_EQ(exists, 0);
  TESSERA_CHECK_HDF5(H5Fclose(file));
  std::remove(path);
}
