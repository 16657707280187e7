#pragma once
// Private: the one rule that decides whether HDF5 may open the files of a step
// directory. A load, CheckpointReader and verify_checkpoint all apply it, so `verify`
// never passes a step that a resume refuses, and nothing reaches HDF5 (which may crash
// or hang on a damaged file) before its bytes are checked against the MANIFEST.

#include <string>
#include <vector>

#include "tessera/comm.hpp"

namespace tessera::io::detail {

// Which listed files have their size and CRC-32C checked: every one (a load, verify, a
// reader that may read any dataset) or only the file HDF5 opens (reading the header).
enum class StepScope { every_file, opened_file };

struct StepProblem {
  std::string name;     // the file it is about; "MANIFEST" for the MANIFEST itself
  std::string message;  // an IoError's text: the path, what is wrong, what to do
};

// What keeps HDF5 from opening the step directory that holds `file` (empty: nothing):
//  - the directory has no MANIFEST, or a damaged one (read_manifest);
//  - `file`, or a file of the step there (checkpoint.h5, checkpoint.rank<digits>.h5),
//    is not listed in it;
//  - a listed file (with opened_file: `file` only) is missing or has another size or
//    CRC-32C.
// The first two stop the check (one problem); the last reports every damaged file.
// share_rank / share_size: hash only every share_size-th listed file from share_rank
// (a collective load shares the reading out over its ranks).
std::vector<StepProblem> step_file_problems(const std::string& file, StepScope scope, int share_rank = 0,
                                            int share_size = 1);

// Throws the first problem as an IoError. With a communicator: collective; the ranks
// share the hashing and every rank throws the same error.
void check_step_files(const std::string& file, StepScope scope, Communicator* comm = nullptr);

// The files of the step in `dir` that a MANIFEST must list: checkpoint.h5 and every
// checkpoint.rank<digits>.h5 present, plus `opened` (a merged file's own name).
std::vector<std::string> step_file_names(const std::string& dir, const std::string& opened = "");

}  // namespace tessera::io::detail
