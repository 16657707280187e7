// GoogleTest main for MPI tests.
//
// - Only rank 0 prints GoogleTest's normal output; other ranks print their own failure
//   messages, prefixed with their rank, so nothing is lost.
// - After every test the ranks agree on its outcome: a failure on any rank is reported
//   by rank 0 with the list of failing ranks, and counts as a failure of the test.
// - Every rank exits with the same code: 1 if any test failed on any rank, 77 (CTest's
//   skip code for tessera tests) if every test was skipped on every rank, else 0.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_test.hpp"

namespace tessera::testing {

std::vector<std::string> all_gather_strings(const std::string& mine, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size), displs(size);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(),
                 MPI_CHAR, comm);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(displs[r], lengths[r]));
  return out;
}

bool all_ranks(bool value, MPI_Comm comm) {
  int local = value ? 1 : 0, global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_LAND, comm);
  return global != 0;
}

std::string scratch_dir(const std::string& name) {
  const std::string dir =
      (std::filesystem::current_path() / ("scratch_" + name + "_np" + std::to_string(world_size()))).string();
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

namespace {

// On ranks other than 0: print failures only, tagged with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

// On every rank: after each test, agree on which ranks failed it.
class RankAgreement : public ::testing::EmptyTestEventListener {
 public:
  RankAgreement(int rank, int size) : rank_(rank), size_(size) {}

  void OnTestEnd(const ::testing::TestInfo& info) override {
    const int failed_here = info.result()->Failed() ? 1 : 0;
    const int skipped_here = info.result()->Skipped() ? 1 : 0;
    std::vector<int> failed(size_), skipped(size_);
    MPI_Allgather(&failed_here, 1, MPI_INT, failed.data(), 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgather(&skipped_here, 1, MPI_INT, skipped.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::string ranks;
    bool all_skipped = true;
    for (int r = 0; r < size_; ++r) {
      if (failed[r]) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      if (!skipped[r]) all_skipped = false;
    }
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    if (!ranks.empty()) {
      ++failed_tests_;
      failed_names_.push_back(name + " (ranks " + ranks + ")");
      if (rank_ == 0) {
        std::printf("[  MPI     ] %s failed on rank(s) %s of %d\n", name.c_str(), ranks.c_str(),
                    size_);
        std::fflush(stdout);
      }
    } else if (all_skipped) {
      ++skipped_tests_;
    } else {
      ++passed_tests_;
    }
  }

  int failed_tests() const { return failed_tests_; }
  int skipped_tests() const { return skipped_tests_; }
  int passed_tests() const { return passed_tests_; }
  const std::vector<std::string>& failed_names() const { return failed_names_; }

 private:
  int rank_, size_;
  int failed_tests_ = 0, skipped_tests_ = 0, passed_tests_ = 0;
  std::vector<std::string> failed_names_;
};

}  // namespace
}  // namespace tessera::testing

int main(int argc, char** argv) {
  int provided = 0;
  // Tests of a background thread that communicates (asynchronous checkpoints) ask for
  // MPI_THREAD_MULTIPLE through the environment; the others keep FUNNELED.
  const char* multiple = std::getenv("TESSERA_TEST_MPI_THREAD_MULTIPLE");
  const bool want_multiple = multiple != nullptr && std::string(multiple) == "1";
  MPI_Init_thread(&argc, &argv, want_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new tessera::testing::RankFailurePrinter(rank));
  }
  auto* agreement = new tessera::testing::RankAgreement(rank, size);
  listeners.Append(agreement);  // owned by GoogleTest

  // Our own exit code below replaces GoogleTest's (it agrees across ranks).
  [[maybe_unused]] const int local_status = RUN_ALL_TESTS();

  int code = 0;
  if (agreement->failed_tests() > 0) {
    code = 1;
  } else if (agreement->passed_tests() == 0 && agreement->skipped_tests() > 0) {
    code = 77;
  }
  if (rank == 0) {
    std::printf("[  MPI     ] %d ranks: %d passed, %d skipped, %d failed on some rank\n", size,
                agreement->passed_tests(), agreement->skipped_tests(),
                agreement->failed_tests());
    for (const auto& name : agreement->failed_names()) {
      std::printf("[  MPI     ] FAILED %s\n", name.c_str());
    }
    std::fflush(stdout);
  }
  MPI_Finalize();
  return code;
}
