# Runs an advect example (examples/c/advect.c, examples/fortran/advect.f90) under mpiexec
# and compares the fields it writes, byte for byte.
#
#   cmake -DMPIEXEC=... -DNUMPROC_FLAG=-n -DEXE=<advect> -DWORK=<dir> -DMODE=<mode>
#         [-DNP=4] [-DSTEPS=100] [-DARGS="nlat=45;nlon=72"] -P check_advect.cmake
#
# MODE=ranks:   the run at NP ranks gives the same bits as the run at 1 rank.
# MODE=restart: a run at 1 rank straight to STEPS, against a run at NP_WRITE ranks to
#               STEPS/2 that writes a restart (LAYOUT) and a run at NP (reading it) to STEPS.
# MODE=run:     one run at NP ranks writing restarts every STEPS/2 steps; it must succeed
#               and print its summary line.

foreach(var MPIEXEC NUMPROC_FLAG EXE WORK MODE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_advect.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT DEFINED NP)
  set(NP 1)
endif()
if(NOT DEFINED STEPS)
  set(STEPS 100)
endif()
if(NOT DEFINED LAYOUT)
  set(LAYOUT shared)
endif()
if(NOT DEFINED NP_WRITE)
  set(NP_WRITE 2)
endif()
math(EXPR HALF "${STEPS} / 2")

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(run_advect np)
  execute_process(COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} ${np} "${EXE}" ${ARGS} ${ARGN}
                  WORKING_DIRECTORY "${WORK}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "np ${np} ${ARGN}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the run at ${np} ranks (${ARGN}) failed with status ${rc}")
  endif()
  if(NOT out MATCHES "step [0-9]+: sum q = ")
    message(FATAL_ERROR "the run at ${np} ranks printed no summary line")
  endif()
endfunction()

function(expect_same a b what)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/${a}" "${WORK}/${b}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: ${a} and ${b} differ")
  endif()
  message(STATUS "${what}: ${a} and ${b} are bit-identical")
endfunction()

if(MODE STREQUAL "ranks")
  run_advect(1 steps=${STEPS} out=np1.bin)
  run_advect(${NP} steps=${STEPS} out=np${NP}.bin)
  expect_same(np1.bin np${NP}.bin "${STEPS} steps at 1 and ${NP} ranks")
elseif(MODE STREQUAL "restart")
  run_advect(1 steps=${STEPS} out=straight.bin)
  run_advect(${NP_WRITE} steps=${HALF} restart_every=${HALF} restart_dir=restart layout=${LAYOUT})
  if(NOT EXISTS "${WORK}/restart/latest")
    message(FATAL_ERROR "the run at ${NP_WRITE} ranks wrote no restart/latest")
  endif()
  run_advect(${NP} steps=${STEPS} restart_from=restart out=restarted.bin)
  expect_same(straight.bin restarted.bin
              "restart written at ${NP_WRITE} ranks (${LAYOUT}), continued at ${NP}")
elseif(MODE STREQUAL "run")
  run_advect(${NP} steps=${STEPS} restart_every=${HALF} restart_dir=restart out=fields.bin)
  if(NOT EXISTS "${WORK}/restart/latest")
    message(FATAL_ERROR "no restart was written")
  endif()
else()
  message(FATAL_ERROR "check_advect.cmake: unknown MODE '${MODE}'")
endif()
