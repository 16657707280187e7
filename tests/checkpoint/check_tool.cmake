# tessera-ckpt smoke test on the write_reference_checkpoints fixture:
#   cmake -DTOOL=<tessera-ckpt> -DDIR=<fixture dir> -P check_tool.cmake
# Checks the output and exit status of info, verify, merge and diff.

function(run_tool expected_status)
  execute_process(COMMAND ${TOOL} ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
  message(STATUS "tessera-ckpt ${ARGN} -> ${status}\n${out}${err}")
  if(NOT status EQUAL expected_status)
    message(FATAL_ERROR "tessera-ckpt ${ARGN} exited ${status}, expected ${expected_status}")
  endif()
  set(out "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect_match text regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "output does not match '${regex}'")
  endif()
endfunction()

set(per_rank "${DIR}/per_rank")
set(shared "${DIR}/shared")
set(merged "${DIR}/merged.h5")
file(REMOVE "${merged}")

run_tool(0 info ${per_rank})
expect_match("${out}" "format: tessera-checkpoint version 2 ")
expect_match("${out}" "checksum: tessera-hashsum64-v2")
expect_match("${out}" "layout: per_rank \\(2 slice files: checkpoint.rank00000.h5 checkpoint.rank00001.h5\\)")
expect_match("${out}" "mesh: data none, dp 1, tp 2, domain 1 \\(world size 2\\)")
expect_match("${out}" "step: 7")
expect_match("${out}" "optimizer: AdamW, step_count 2")
expect_match("${out}" "metadata:\n  . model:\n  .   hidden: 16\n  .   layout: per_rank\n")
expect_match("${out}" "/model\n  0\n    weight  f32\\[16, 8\\]  {dp: Replicate, tp: Shard\\(0\\), domain: Replicate}")
expect_match("${out}" "    weight  f32\\[8, 16\\]  {dp: Replicate, tp: Shard\\(1\\), domain: Replicate}")
expect_match("${out}" "    weight  bf16\\[4, 4\\]")
expect_match("${out}" "/optimizer\n  0\n    weight\n      exp_avg  f32\\[16, 8\\]")
expect_match("${out}" "19 tensors")

run_tool(0 verify ${per_rank})
expect_match("${out}" "ok    /model/0.weight")
expect_match("${out}" "verify: all 19 datasets ok")
run_tool(0 verify ${shared})
expect_match("${out}" "verify: all 19 datasets ok")

run_tool(0 merge ${per_rank} ${merged})
expect_match("${out}" "into .*merged.h5 \\(19 datasets, layout shared\\)")
run_tool(0 info ${merged})
expect_match("${out}" "layout: shared\n")
run_tool(0 verify ${merged})
expect_match("${out}" "verify: all 19 datasets ok")

run_tool(0 diff ${per_rank} ${shared})
expect_match("${out}" "/model/1.weight  max_abs_diff 0\n")
expect_match("${out}" "diff: identical")
run_tool(0 diff ${merged} ${shared})
expect_match("${out}" "diff: identical")

# A different checkpoint: the reference file holds /model only, with the same values.
run_tool(2 info ${DIR}/reference.h5)
expect_match("${out}" "is not a tessera checkpoint")
run_tool(2 info ${DIR}/does-not-exist)
expect_match("${out}" "tessera-ckpt: error: checkpoint: '.*does-not-exist' does not exist")
run_tool(2 frobnicate)
expect_match("${out}" "usage: tessera-ckpt info PATH")

# Format 1, written before format 2 by the same fixture program (tests/checkpoint/
# data/format_v1): still read, verified with its own checksum, same values.
if(DEFINED V1)
  run_tool(0 info ${V1}/per_rank)
  expect_match("${out}" "format: tessera-checkpoint version 1 ")
  expect_match("${out}" "checksum: tessera-hashsum64-v1")
  run_tool(0 verify ${V1}/per_rank)
  expect_match("${out}" "verify: all 19 datasets ok")
  run_tool(0 verify ${V1}/shared)
  expect_match("${out}" "verify: all 19 datasets ok")
  run_tool(0 diff ${V1}/per_rank ${per_rank})
  expect_match("${out}" "diff: identical")
endif()
