# Runs mesh_info under mpiexec and checks its output exactly (a CTest helper, run with
# cmake -P). Variables:
#   MPIEXEC, NUMPROC_FLAG, NP, EXE, CONFIG  what to run (CONFIG may be empty: no argument)
#   MODE=layout   stdout must be exactly NP lines `rank G dp D tp T domain M` following
#                 the layout formula for TENSOR and DOMAIN, and the exit status 0;
#   MODE=error    the exit status must be non-zero, stderr must hold exactly one line
#                 `mesh_info: error: ...` (containing EXPECT_ERROR when given), and
#                 stdout no mesh lines.

cmake_minimum_required(VERSION 3.25)

foreach(var MPIEXEC NP EXE MODE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_mesh_info.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT DEFINED NUMPROC_FLAG)
  set(NUMPROC_FLAG -n)
endif()

set(args)
if(NOT "${CONFIG}" STREQUAL "")
  set(args "${CONFIG}")
endif()
execute_process(
  COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} ${NP} "${EXE}" ${args}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
set(report "command: ${MPIEXEC} ${NUMPROC_FLAG} ${NP} ${EXE} ${args}\nexit status: ${rc}\n--- stdout ---\n${out}--- stderr ---\n${err}")

if(MODE STREQUAL "layout")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mesh_info failed\n${report}")
  endif()
  set(expected "")
  math(EXPR last "${NP} - 1")
  foreach(g RANGE 0 ${last})
    math(EXPR domain "${g} % ${DOMAIN}")
    math(EXPR tp "(${g} / ${DOMAIN}) % ${TENSOR}")
    math(EXPR dp "${g} / (${TENSOR} * ${DOMAIN})")
    string(APPEND expected "rank ${g} dp ${dp} tp ${tp} domain ${domain}\n")
  endforeach()
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "mesh_info output differs from the layout formula "
                        "(tensor ${TENSOR}, domain ${DOMAIN})\n--- expected ---\n${expected}${report}")
  endif()
  message(STATUS "mesh_info printed the ${NP} expected lines:\n${out}")
elseif(MODE STREQUAL "error")
  if(rc EQUAL 0)
    message(FATAL_ERROR "mesh_info succeeded but should have failed\n${report}")
  endif()
  # Count line starts by hand: a message may hold ';', which CMake lists split on.
  set(rest "\n${err}")
  set(n_errors 0)
  while(TRUE)
    string(FIND "${rest}" "\nmesh_info: error: " at)
    if(at EQUAL -1)
      break()
    endif()
    math(EXPR n_errors "${n_errors} + 1")
    math(EXPR at "${at} + 1")
    string(SUBSTRING "${rest}" ${at} -1 rest)
  endwhile()
  if(NOT n_errors EQUAL 1)
    message(FATAL_ERROR "expected exactly one `mesh_info: error:` line on stderr, "
                        "found ${n_errors}\n${report}")
  endif()
  if(DEFINED EXPECT_ERROR AND NOT err MATCHES "${EXPECT_ERROR}")
    message(FATAL_ERROR "the error does not mention `${EXPECT_ERROR}`\n${report}")
  endif()
  if(out MATCHES "rank [0-9]+ dp")
    message(FATAL_ERROR "mesh_info printed mesh lines although it failed\n${report}")
  endif()
  message(STATUS "mesh_info failed as expected:\n${err}")
else()
  message(FATAL_ERROR "check_mesh_info.cmake: unknown MODE '${MODE}'")
endif()
