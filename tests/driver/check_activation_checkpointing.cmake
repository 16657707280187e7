# tessera-run's model.activation_checkpointing (issue 22 item 2), run with cmake -P (CTest
# driver_activation_checkpointing). Arguments (-D): MPIEXEC, NUMPROC_FLAG, RUN
# (tessera-run), CKPT (tessera-ckpt), SOURCE_DIR, WORK_DIR.
#   1. docs/driver.md shows examples/configs/activation_checkpointing.yaml whole, and it
#      trains (fsdp2 2) below the unigram baseline;
#   2. the same training with and without checkpointing ends with bit-identical weights:
#      the decoder at tp 2 (sequence parallel) and fsdp2 2, the field emulator at
#      domain 2 and tp 2 (tessera-ckpt diff: max_abs_diff 0 everywhere);
#   3. --dry-run prints the saving under the memory plan, for both models;
#   4. bad values are ConfigErrors naming the key, before any step.

set(dtiny "${SOURCE_DIR}/tests/driver/decoder_tiny.yaml")
set(tiny "${SOURCE_DIR}/tests/driver/tiny.yaml")
set(data "--set=data.path=${SOURCE_DIR}/data/rossby_haurwitz.h5")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/driver_support.cmake")

# Every max_abs_diff of `tessera-ckpt diff a b` must be exactly 0.
function(must_be_identical a b what)
  execute_process(COMMAND ${CKPT} diff "${a}" "${b}" OUTPUT_VARIABLE diff ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT diff MATCHES "max_abs_diff" OR diff MATCHES "only in| vs B ")
    message(FATAL_ERROR "tessera-ckpt diff ${a} ${b} (${rc}):\n${diff}${err}")
  endif()
  string(REGEX MATCHALL "max_abs_diff [^\n]+" diffs "${diff}")
  foreach(d IN LISTS diffs)
    string(REPLACE "max_abs_diff " "" v "${d}")
    if(NOT v MATCHES "^0(\\.0*)?(e[-+]?0+)?( |$)")
      message(FATAL_ERROR "${what}: with and without checkpointing differ (${d}):\n${diff}")
    endif()
  endforeach()
  message(STATUS "${what}: bit-identical with and without activation checkpointing")
endfunction()

# 1. The worked example.
set(example "${SOURCE_DIR}/examples/configs/activation_checkpointing.yaml")
file(READ "${SOURCE_DIR}/docs/driver.md" doc)
file(READ "${example}" text)
string(FIND "${doc}" "```yaml\n${text}```" at)
if(at LESS 0)
  message(FATAL_ERROR "docs/driver.md does not show examples/configs/activation_checkpointing.yaml whole in a yaml block")
endif()
must_train(2 out "${example}" "--set=checkpoint.dir=")
foreach(expect "activation checkpointing: every 2 \\(2 of 4 blocks" "final loss [^\n]*\\(below")
  if(NOT out MATCHES "${expect}")
    message(FATAL_ERROR "examples/configs/activation_checkpointing.yaml: expected '${expect}':\n${out}")
  endif()
endforeach()
message(STATUS "examples/configs/activation_checkpointing.yaml: ok")

# 2. With and without, through the driver.
set(cases
    "decoder tp 2|${dtiny}|--set=schedule.steps=4"
    "decoder fsdp2 2|${dtiny}|--set=parallelism={data: fsdp2}|--set=schedule.steps=4"
    "field emulator domain 2|${tiny}|${data}|--set=parallelism={data: none, domain: 2}|--set=model.blocks=2|--set=schedule.steps=4"
    "field emulator tp 2|${tiny}|${data}|--set=parallelism={data: none, tensor: 2}|--set=model.blocks=2|--set=schedule.steps=4")
set(n 0)
foreach(case IN LISTS cases)
  string(REPLACE "|" ";" args "${case}")
  list(POP_FRONT args what)
  math(EXPR n "${n} + 1")
  must_train(2 out ${args} --set=checkpoint.interval=0 "--set=checkpoint.dir=${WORK_DIR}/none${n}")
  must_train(2 out ${args} --set=checkpoint.interval=0 --set=model.activation_checkpointing=blocks
             "--set=checkpoint.dir=${WORK_DIR}/blocks${n}")
  if(NOT out MATCHES "activation checkpointing: blocks \\(2 of 2 blocks recompute")
    message(FATAL_ERROR "${what}: no checkpointing line:\n${out}")
  endif()
  must_be_identical("${WORK_DIR}/none${n}" "${WORK_DIR}/blocks${n}" "${what}")
endforeach()

# 3. The memory plan shows the saving.
foreach(case "${dtiny}" "${tiny}|${data}|--set=parallelism={data: none, domain: 2}|--set=model.blocks=3")
  string(REPLACE "|" ";" args "${case}")
  must_train(2 out ${args} --dry-run "--set=model.activation_checkpointing=every 1")
  if(NOT out MATCHES "activation checkpointing \\(blocks\\): rank 0's activations [0-9.]+ [KMG]?i?B instead of [0-9.]+ [KMG]?i?B without it \\(saves [0-9.]+ [KMG]?i?B\\)")
    message(FATAL_ERROR "--dry-run with activation checkpointing: no saving under the memory plan:\n${out}")
  endif()
endforeach()
message(STATUS "--dry-run: the memory plan shows the saving")

# 4. Errors naming the key.
foreach(bad "every 0" "every" "all" "every 2.5")
  run_driver(out rc 2 ${dtiny} "--set=model.activation_checkpointing=${bad}" "--set=checkpoint.dir=")
  if(rc EQUAL 0 OR NOT out MATCHES "model.activation_checkpointing: unknown value '${bad}' \\(expected none, blocks, or every N"
     OR out MATCHES "step +1/")
    message(FATAL_ERROR "model.activation_checkpointing=${bad}: expected a ConfigError naming the key (${rc}):\n${out}")
  endif()
endforeach()
message(STATUS "bad values: errors naming the key")
