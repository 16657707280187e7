# One fuzz smoke run (fuzz/CMakeLists.txt registers it as fuzz_smoke_<target>):
#
#   cmake -DFUZZER=<exe> -DSEEDS=<seed dir> -DWORK=<scratch dir> -DRUNS=<n> -DSECONDS=<s>
#         [-DDICT=<file>] -P run_smoke.cmake
#
# Fuzzes a fresh copy of the seed corpus (libFuzzer adds the inputs it finds to its
# first corpus directory, which must not be the source tree) for RUNS inputs or SECONDS,
# whichever comes first. libFuzzer exits non-zero on a crash, a sanitizer report, a leak,
# a per-input timeout or running out of memory; the reproducer is WORK/artifacts/*.
foreach(var FUZZER SEEDS WORK RUNS SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_smoke.cmake: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/artifacts")
file(GLOB seeds "${SEEDS}/*")
if(NOT seeds)
  message(FATAL_ERROR "run_smoke.cmake: no seed files in ${SEEDS}")
endif()
file(COPY ${seeds} DESTINATION "${WORK}/corpus")

set(args
  -runs=${RUNS} -max_total_time=${SECONDS}
  -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=2048
  -print_final_stats=1
  -artifact_prefix=${WORK}/artifacts/)
if(DEFINED DICT AND EXISTS "${DICT}")
  list(APPEND args -dict=${DICT})
endif()

message(STATUS "${FUZZER} ${args} ${WORK}/corpus")
execute_process(COMMAND "${FUZZER}" ${args} "${WORK}/corpus"
                WORKING_DIRECTORY "${WORK}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB artifacts "${WORK}/artifacts/*")
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); reproducer(s): ${artifacts}\n"
                      "Rerun one with: ${FUZZER} <reproducer>")
endif()
