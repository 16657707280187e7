# tessera-run's decoder with uneven tensor-parallel shards, run with cmake -P (CTest
# driver_decoder_uneven.np2). Arguments (-D): MPIEXEC, NUMPROC_FLAG, RUN (tessera-run),
# CKPT (tessera-ckpt), SOURCE_DIR, WORK_DIR.
# The tiny decoder with an odd vocabulary (33) and MLP width (33), untied, without
# sequence parallelism: tp 2 (blocks of 17 and 16) trains and ends with the same
# weights as tp 1 (within 1e-5: fp32 rounding; measured 1.2e-7); an MLP width
# smaller than the tp size is still an error naming the key.

set(dtiny "${SOURCE_DIR}/tests/driver/decoder_tiny.yaml")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/../driver/driver_support.cmake")

set(odd ${dtiny} --set=checkpoint.interval=0 --set=model.vocab=33 --set=model.hidden=33
        --set=model.sequence_parallel=false)
foreach(tp 1 2)
  expect_success(${tp} ${odd} --set=parallelism.tensor=${tp} "--set=checkpoint.dir=${WORK_DIR}/tp${tp}")
endforeach()
# 1e-5: fp32 rounding over the 8 steps (measured 1.2e-7), as driver_decoder_layouts.
expect_close("${WORK_DIR}/tp1" "${WORK_DIR}/tp2" 1e-5 "vocab 33 / hidden 33: tp 1 and tp 2")
if(NOT diff_output MATCHES "head.weight" OR NOT diff_output MATCHES "mlp.down.weight")
  message(FATAL_ERROR "tessera-ckpt diff tp1 tp2 lacks the uneven tensors:\n${diff_output}")
endif()
message(STATUS "vocab 33, hidden 33: tp 1 and tp 2 (uneven shards) agree within ${last_difference}")

expect_error(2 "tessera-run: error: [^\n]*model.hidden \\(1\\) must be at least parallelism.tensor"
             ${odd} --set=model.hidden=1 "--set=checkpoint.dir=")
