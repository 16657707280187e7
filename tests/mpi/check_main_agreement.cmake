# Runs mpi_main_selftest at 2 ranks and checks the MPI test main's contract:
# a failure on one rank fails the run on every rank (exit code 1, reported by rank 0
# with the failing rank), an all-skipped run exits 77, a passing run exits 0.
# Inputs: -DMPIEXEC=... -DEXE=...

function(run_case filter expected_code)
  execute_process(COMMAND ${MPIEXEC} -n 2 ${EXE} --gtest_filter=${filter}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL expected_code)
    message(FATAL_ERROR "filter ${filter}: exit code ${code}, expected ${expected_code}\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
  set(last_err "${err}" PARENT_SCOPE)
endfunction()

run_case("SelfTest.Passes" 0)
run_case("SelfTest.SkippedEverywhere" 77)
run_case("SelfTest.FailsOnTheLastRankOnly" 1)
if(NOT last_out MATCHES "FailsOnTheLastRankOnly failed on rank\\(s\\) 1 of 2")
  message(FATAL_ERROR "rank 0 did not report rank 1's failure:\n${last_out}")
endif()
if(NOT last_err MATCHES "\\[rank 1\\].*deliberate failure")
  message(FATAL_ERROR "rank 1's failure message was lost:\n${last_err}")
endif()
message(STATUS "MPI test main: exit codes 0 / 77 / 1 and cross-rank failure report as expected")
