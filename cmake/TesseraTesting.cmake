# Test helpers. Every test executable links the MPI-aware GoogleTest main
# (tests/support/mpi_test_main.cpp) and is registered once per rank count:
#
#   tessera_add_mpi_test(NAME test_mesh
#                        SOURCES mpi/test_mesh.cpp
#                        RANKS 1 2 4 8
#                        LABELS mesh
#                        [LIBRARIES extra...] [PRIVATE_HEADERS] [TIMEOUT seconds])
#
# gives the CTest tests test_mesh.np1 ... test_mesh.np8, labelled with the concept
# labels and np<N>, run as `mpiexec -n N <build>/bin/test_mesh`. An executable whose
# tests were all skipped (e.g. CUDA tests without a GPU) exits 77, which CTest reports
# as skipped rather than passed. PRIVATE_HEADERS lets a test include src/ internals.

set(TESSERA_TEST_SKIP_CODE 77)

function(tessera_add_mpi_test)
  cmake_parse_arguments(T "PRIVATE_HEADERS" "NAME;TIMEOUT" "SOURCES;RANKS;LABELS;LIBRARIES" ${ARGN})
  if(NOT T_NAME OR NOT T_SOURCES OR NOT T_RANKS)
    message(FATAL_ERROR "tessera_add_mpi_test needs NAME, SOURCES and RANKS")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE tessera::tessera tessera_test_main ${T_LIBRARIES})
  if(T_PRIVATE_HEADERS)
    target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  endif()
  foreach(n IN LISTS T_RANKS)
    add_test(NAME ${T_NAME}.np${n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${T_NAME}.np${n} PROPERTIES
      LABELS "${T_LABELS};np${n}"
      PROCESSORS ${n}
      SKIP_RETURN_CODE ${TESSERA_TEST_SKIP_CODE}
      TIMEOUT ${T_TIMEOUT})
  endforeach()
endfunction()
