# Runs one documentation sample (or the tessera-run fixture the samples load from) under
# mpiexec in WORK, and fails unless it exits with status 0 and its output matches every
# regular expression in EXPECT.
#
#   cmake -DMPIEXEC=... -DNUMPROC_FLAG=-n -DNP=2 -DEXE=<program> -DWORK=<dir>
#         [-DCLEAN=ON] [-DARGS=a;b] [-DEXPECT=regex;regex]
#         [-DCOPY_FROM=runs/demo -DCOPY_TO=runs/emulator] -P run_sample.cmake
#
# CLEAN=ON empties WORK first. COPY_FROM/COPY_TO (relative to WORK) copy a directory
# after a successful run.

foreach(var MPIEXEC NUMPROC_FLAG NP EXE WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_sample.cmake: ${var} is not set")
  endif()
endforeach()

if(CLEAN)
  file(REMOVE_RECURSE "${WORK}")
endif()
file(MAKE_DIRECTORY "${WORK}")

execute_process(COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} ${NP} "${EXE}" ${ARGS}
                WORKING_DIRECTORY "${WORK}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "mpiexec ${NUMPROC_FLAG} ${NP} ${EXE} ${ARGS} (in ${WORK}):\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the sample failed with status ${rc}")
endif()
foreach(regex IN LISTS EXPECT)
  if(NOT out MATCHES "${regex}")
    message(FATAL_ERROR "the output does not match '${regex}'")
  endif()
endforeach()

if(DEFINED COPY_FROM AND DEFINED COPY_TO)
  file(REMOVE_RECURSE "${WORK}/${COPY_TO}")
  file(COPY "${WORK}/${COPY_FROM}/" DESTINATION "${WORK}/${COPY_TO}")
endif()
