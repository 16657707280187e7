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
