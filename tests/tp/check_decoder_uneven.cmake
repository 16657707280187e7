# tessera-run's decoder with uneven tensor-parallel shards, run with cmake -P (CTest
# driver_decoder_uneven.np2). Arguments (-D): MPIEXEC, NUMPROC_FLAG, RUN (tessera-run),
# CKPT (tessera-ckpt), SOURCE_DIR, WORK_DIR.
# The tiny decoder with an odd vocabulary (33) and MLP width (33), untied, without
# sequence parallelism: tp 2 (blocks of 17 and 16) trains and ends with the same
# weights as tp 1 (within 1e-4, the tolerance of driver_decoder_gqa); an MLP width
# smaller than the tp size is still an error naming the key.

set(dtiny "${SOURCE_DIR}/tests/driver/decoder_tiny.yaml")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/../driver/driver_support.cmake")

set(odd ${dtiny} --set=checkpoint.interval=0 --set=model.vocab=33 --set=model.hidden=33
        --set=model.sequence_parallel=false)
foreach(tp 1 2)
  run_driver(out rc ${tp} ${odd} --set=parallelism.tensor=${tp} "--set=checkpoint.dir=${WORK_DIR}/tp${tp}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "vocab 33, hidden 33 at tp ${tp} failed (${rc}):\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${CKPT} diff "${WORK_DIR}/tp1" "${WORK_DIR}/tp2"
                OUTPUT_VARIABLE diff ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT diff MATCHES "head.weight" OR NOT diff MATCHES "mlp.down.weight" OR diff MATCHES "only in| vs B ")
  message(FATAL_ERROR "tessera-ckpt diff tp1 tp2 (${rc}):\n${diff}${err}")
endif()
string(REGEX MATCHALL "max_abs_diff [^\n]+" diffs "${diff}")
foreach(d IN LISTS diffs)
  string(REPLACE "max_abs_diff " "" v "${d}")
  if(v MATCHES "nan|inf" OR v GREATER 1e-4)
    message(FATAL_ERROR "vocab 33 / hidden 33: tp 1 and tp 2 differ (${d}, tolerance 1e-4):\n${diff}")
  endif()
endforeach()
message(STATUS "vocab 33, hidden 33: tp 1 and tp 2 (uneven shards) agree")

run_driver(out rc 2 ${odd} --set=model.hidden=1 "--set=checkpoint.dir=")
if(rc EQUAL 0 OR NOT out MATCHES "tessera-run: error: [^\n]*model.hidden \\(1\\) must be at least parallelism.tensor")
  message(FATAL_ERROR "hidden 1 at tp 2: expected an error naming model.hidden; got ${rc}:\n${out}")
endif()
