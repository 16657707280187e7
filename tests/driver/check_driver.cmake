# Driver checks, run with cmake -P (CTest label `driver`). Arguments (-D):
#   MODE      demo | resume | layouts | bad_config | dry_run
#   MPIEXEC, NUMPROC_FLAG, RUN (tessera-run), CKPT (tessera-ckpt), SOURCE_DIR, WORK_DIR
# Every tessera-run call runs in SOURCE_DIR (the configs name data/rossby_haurwitz.h5
# relative to it) and writes checkpoints under WORK_DIR only.

set(tiny "${SOURCE_DIR}/tests/driver/tiny.yaml")
set(data "--set=data.path=${SOURCE_DIR}/data/rossby_haurwitz.h5")

# run_driver(<out-var> <rc-var> NP <n> ARGS ...): stdout+stderr into <out-var>.
function(run_driver out_var rc_var np)
  execute_process(COMMAND ${MPIEXEC} ${NUMPROC_FLAG} ${np} ${RUN} ${ARGN}
                  WORKING_DIRECTORY "${SOURCE_DIR}"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(${out_var} "${out}${err}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
endfunction()

function(expect_success np)
  run_driver(out rc ${np} ${ARGN})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tessera-run ${ARGN} on ${np} ranks failed (${rc}):\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# Largest max_abs_diff that `tessera-ckpt diff A B` reports (the checkpoints must hold the
# same datasets). if(... GREATER ...) compares as doubles.
function(max_difference a b out_var)
  execute_process(COMMAND ${CKPT} diff "${a}" "${b}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT out MATCHES "max_abs_diff" OR out MATCHES "only in| vs B ")
    message(FATAL_ERROR "tessera-ckpt diff ${a} ${b} (${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCHALL "max_abs_diff [^\n]+" diffs "${out}")
  set(max 0)
  foreach(d IN LISTS diffs)
    string(REPLACE "max_abs_diff " "" v "${d}")
    if(v MATCHES "nan|inf")
      message(FATAL_ERROR "tessera-ckpt diff ${a} ${b}: ${d}")
    endif()
    if(v GREATER max)
      set(max "${v}")
    endif()
  endforeach()
  set(${out_var} "${max}" PARENT_SCOPE)
  set(diff_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

if(MODE STREQUAL "demo")
  # The README's claim: the demo trains below the persistence baseline, printed beside it.
  expect_success(4 "${SOURCE_DIR}/data/configs/demo.yaml" "--set=checkpoint.dir=${WORK_DIR}/demo")
  if(NOT last_output MATCHES "final loss ([0-9.e+-]+) persistence ([0-9.e+-]+) ratio ([0-9.]+) \\(below")
    message(FATAL_ERROR "the demo did not end below the persistence baseline:\n${last_output}")
  endif()
  set(ratio "${CMAKE_MATCH_3}")
  if(NOT ratio LESS 0.5)
    message(FATAL_ERROR "the demo's loss is only ${ratio} x persistence (expected < 0.5):\n${last_output}")
  endif()
  string(REGEX MATCHALL "\nstep +[0-9]+/" lines "${last_output}")
  list(LENGTH lines n)
  if(NOT n EQUAL 10 OR NOT last_output MATCHES "samples/s" OR NOT last_output MATCHES "grid points/s")
    message(FATAL_ERROR "expected 10 progress lines with samples/s and grid points/s:\n${last_output}")
  endif()
  if(NOT EXISTS "${WORK_DIR}/demo/step_00000100/checkpoint.h5")
    message(FATAL_ERROR "the demo wrote no final checkpoint under ${WORK_DIR}/demo")
  endif()
  message(STATUS "demo: loss ${ratio} x persistence")

elseif(MODE STREQUAL "resume")
  # Uninterrupted: 8 steps, checkpoints at 3, 6, 8.
  expect_success(4 ${tiny} ${data} "--set=checkpoint.dir=${WORK_DIR}/full")
  # Killed (SIGKILL on every rank) after step 5: the last checkpoint is step 3.
  run_driver(out rc 4 ${tiny} ${data} "--set=checkpoint.dir=${WORK_DIR}/killed" --kill-after-step 5)
  if(rc EQUAL 0)
    message(FATAL_ERROR "the killed run exited 0:\n${out}")
  endif()
  file(READ "${WORK_DIR}/killed/latest" latest)
  string(STRIP "${latest}" latest)
  if(NOT latest STREQUAL "step_00000003" OR EXISTS "${WORK_DIR}/killed/step_00000006")
    message(FATAL_ERROR "after the kill, latest is '${latest}' (expected step_00000003)")
  endif()
  expect_success(4 ${tiny} ${data} "--set=checkpoint.dir=${WORK_DIR}/killed" --set=resume=latest)
  if(NOT last_output MATCHES "resumed from [^\n]*step_00000003[^\n]* at step 3")
    message(FATAL_ERROR "the resumed run did not report resuming at step 3:\n${last_output}")
  endif()
  # Bit-identical weights and optimizer state on the host backend.
  execute_process(COMMAND ${CKPT} diff "${WORK_DIR}/full" "${WORK_DIR}/killed" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "diff: identical")
    message(FATAL_ERROR "resumed run differs from the uninterrupted run:\n${out}")
  endif()
  message(STATUS "resume: bit-identical after kill at step 5 and resume from step 3")

elseif(MODE STREQUAL "layouts")
  # The same training at (dp, tp, domain) = (1,1,1), (1,2,2), (2,2,1).
  set(common ${tiny} ${data} --set=checkpoint.interval=0)
  expect_success(1 ${common} "--set=checkpoint.dir=${WORK_DIR}/l111" --set=parallelism.tensor=1 --set=parallelism.domain=1)
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/l122")
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/l221" --set=parallelism.data=ddp --set=parallelism.domain=1)
  foreach(other l122 l221)
    max_difference("${WORK_DIR}/l111" "${WORK_DIR}/${other}" max)
    # fp32 tolerance: weights are O(0.1..1) and 8 AdamW steps move each by at most ~lr.
    if(max GREATER 1e-5)
      message(FATAL_ERROR "(1,1,1) and ${other} differ by up to ${max} (tolerance 1e-5):\n${diff_output}")
    endif()
    message(STATUS "(1,1,1) vs ${other}: max abs difference ${max}")
  endforeach()

elseif(MODE STREQUAL "bad_config")
  # Rejected before any training, naming the key, once (rank 0), non-zero on every rank.
  file(WRITE "${WORK_DIR}/tensor0.yaml" "parallelism:\n  data: none\n  tensor: 0\n")
  file(WRITE "${WORK_DIR}/unknown.yaml" "model: {width: 8}\ndata: {batchsize: 4}\n")
  file(WRITE "${WORK_DIR}/unknown_top.yaml" "schedule: {steps: 3}\noptimiser: {lr: 1.0}\n")
  foreach(case "tensor0.yaml|parallelism.tensor" "unknown.yaml|data.batchsize" "unknown_top.yaml|optimiser")
    string(REPLACE "|" ";" case "${case}")
    list(GET case 0 file)
    list(GET case 1 key)
    run_driver(out rc 2 "${WORK_DIR}/${file}")
    if(rc EQUAL 0 OR NOT out MATCHES "tessera-run: error: [^\n]*${key}")
      message(FATAL_ERROR "${file}: expected a non-zero exit and an error naming ${key}; got ${rc}:\n${out}")
    endif()
    string(REGEX MATCHALL "tessera-run: error:" errors "${out}")
    list(LENGTH errors n)
    if(NOT n EQUAL 1)
      message(FATAL_ERROR "${file}: expected the error once (rank 0 only), got ${n} times:\n${out}")
    endif()
  endforeach()
  # An unknown key given with --set is rejected the same way.
  run_driver(out rc 2 ${tiny} --set=optimizer.learning_rate=1)
  if(rc EQUAL 0 OR NOT out MATCHES "optimizer.learning_rate")
    message(FATAL_ERROR "--set optimizer.learning_rate: expected an error naming the key; got ${rc}:\n${out}")
  endif()

elseif(MODE STREQUAL "dry_run")
  expect_success(4 "${SOURCE_DIR}/data/configs/demo.yaml" --dry-run "--set=checkpoint.dir=${WORK_DIR}/none")
  if(NOT last_output MATCHES "mesh: 4 ranks = dp 1 x tp 2 x domain 2" OR
     NOT last_output MATCHES "per-rank memory plan" OR NOT last_output MATCHES "\n +3 +0 +1 +1 +\\[16, 32\\)")
    message(FATAL_ERROR "unexpected --dry-run output:\n${last_output}")
  endif()
  if(last_output MATCHES "\nstep " OR EXISTS "${WORK_DIR}/none")
    message(FATAL_ERROR "--dry-run trained or wrote a checkpoint:\n${last_output}")
  endif()
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
