# The helpers every tessera-run check script shares (include() it; the script is run
# with cmake -P and -D MPIEXEC, NUMPROC_FLAG, RUN (tessera-run), CKPT (tessera-ckpt),
# SOURCE_DIR).

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

# must_train(NP <out-var> ARGS ...): expect_success, its output into <out-var>.
function(must_train np out_var)
  expect_success(${np} ${ARGN})
  set(${out_var} "${last_output}" PARENT_SCOPE)
endfunction()

# expect_error(NP <regex> ARGS ...): tessera-run must exit non-zero with output matching
# <regex>; the output into last_output.
function(expect_error np expected)
  run_driver(out rc ${np} ${ARGN})
  if(rc EQUAL 0 OR NOT out MATCHES "${expected}")
    message(FATAL_ERROR "tessera-run ${ARGN} on ${np} ranks: expected an error matching '${expected}'; "
                        "got ${rc}:\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# refused_once(<output> <what>): the output of a run refused before training: one
# "tessera-run: error:" (rank 0 only) and no step line.
function(refused_once output what)
  string(REGEX MATCHALL "tessera-run: error:" errors "${output}")
  list(LENGTH errors n)
  if(NOT n EQUAL 1 OR output MATCHES "\nstep ")
    message(FATAL_ERROR "${what}: expected the error once (rank 0 only) and before training, "
                        "got it ${n} times:\n${output}")
  endif()
endfunction()

# expect_refusal(NP <regex> ARGS ...): a configuration refused before training: expect_error
# with <regex> after "tessera-run: error:", and refused_once.
function(expect_refusal np expected)
  expect_error(${np} "tessera-run: error: [^\n]*${expected}" ${ARGN})
  refused_once("${last_output}" "tessera-run ${ARGN}")
  set(last_output "${last_output}" PARENT_SCOPE)
endfunction()

# expect_close(<checkpoint A> <checkpoint B> <tolerance> <what>): every tensor of the two
# within <tolerance> (max_difference); the largest difference into last_difference, the
# diff into diff_output.
function(expect_close a b tolerance what)
  max_difference("${a}" "${b}" max)
  if(max GREATER tolerance)
    message(FATAL_ERROR "${what} differ by up to ${max} (tolerance ${tolerance}):\n${diff_output}")
  endif()
  set(last_difference "${max}" PARENT_SCOPE)
  set(diff_output "${diff_output}" PARENT_SCOPE)
endfunction()

# expect_identical(<checkpoint A> <checkpoint B> <what>): weights and optimizer state bit
# for bit (`tessera-ckpt diff` says identical).
function(expect_identical a b what)
  execute_process(COMMAND ${CKPT} diff "${a}" "${b}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "diff: identical")
    message(FATAL_ERROR "${what} differ:\n${out}${err}")
  endif()
endfunction()

# unpack(<"a|b|..."> <var-a> <var-b> ...): the fields of a '|'-separated case into variables.
function(unpack case)
  string(REPLACE "|" ";" fields "${case}")
  set(i 0)
  foreach(var IN LISTS ARGN)
    list(GET fields ${i} value)
    set(${var} "${value}" PARENT_SCOPE)
    math(EXPR i "${i} + 1")
  endforeach()
endfunction()

# expect_relatively_close(<reference> <value> <tolerance> <what>): |value - reference| <=
# tolerance |reference| (in Python: CMake has no floating-point arithmetic).
function(expect_relatively_close reference value tolerance what)
  execute_process(COMMAND /usr/bin/python3 -c
                  "import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(0 if abs(b - a) <= t * abs(a) else 1)"
                  ${reference} ${value} ${tolerance} RESULT_VARIABLE close)
  if(NOT close EQUAL 0)
    message(FATAL_ERROR "${what}: ${value} vs ${reference} (relative tolerance ${tolerance})")
  endif()
endfunction()

# expect_shown_whole(<doc.md> <config>): the document shows the file whole in a yaml block.
function(expect_shown_whole doc config)
  file(READ "${doc}" doc_text)
  file(READ "${config}" text)
  string(FIND "${doc_text}" "```yaml\n${text}```" at)
  if(at LESS 0)
    message(FATAL_ERROR "${doc} does not show ${config} whole in a yaml block")
  endif()
endfunction()
