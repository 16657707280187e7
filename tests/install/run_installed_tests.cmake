# Driver of the install_tests test (cmake -P). See tests/install/CMakeLists.txt.
# Any failing step stops the test with that step's full output.

cmake_minimum_required(VERSION 3.25)

foreach(var TESSERA_BUILD_DIR WORK_DIR PROJECT_DIR GENERATOR C_COMPILER CXX_COMPILER CTEST)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_installed_tests.cmake: ${var} is not set")
  endif()
endforeach()

set(INSTALL_TEST install_tests)
include("${CMAKE_CURRENT_LIST_DIR}/install_steps.cmake")

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# 1. Install the build tree into a private prefix.
install_tessera(BUILD_DIR "${TESSERA_BUILD_DIR}" PREFIX "${prefix}" CONFIG "${BUILD_CONFIG}")

# 2. Configure installed_tests/ against the prefix only: no package registry, and the
#    build tree is nowhere on the search path.
set(args -S "${PROJECT_DIR}" -B "${build}" -G "${GENERATOR}"
         "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
         "-DEXPECTED_TESSERA_DIR=${TESSERA_PACKAGE_DIR}" "-DWITH_FORTRAN=${WITH_FORTRAN}"
         -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
set(languages C CXX)
if(WITH_FORTRAN)
  list(APPEND languages Fortran)
endif()
toolchain_args(toolchain ${languages})
list(APPEND args ${toolchain})
run_step(NAME configure COMMAND "${CMAKE_COMMAND}" ${args})

# 3. Build it (two jobs: CI has two cores).
set(config_args)
if(BUILD_CONFIG)
  set(config_args --config "${BUILD_CONFIG}")
endif()
run_step(NAME build COMMAND "${CMAKE_COMMAND}" --build "${build}" --parallel 2 ${config_args})

# 4. The programs were compiled against the prefix's headers and module only: no compile
#    command names the include directories of the tessera build (the sources'
#    include/, the generated <build>/include, tessera.mod's <build>/mod).
get_filename_component(repo "${PROJECT_DIR}/../../.." ABSOLUTE)
if(EXISTS "${build}/compile_commands.json")
  file(READ "${build}/compile_commands.json" commands)
  foreach(dir "${repo}/include" "${TESSERA_BUILD_DIR}/include" "${TESSERA_BUILD_DIR}/mod")
    string(FIND "${commands}" "${dir}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install_tests: a compile command names ${dir} of the build tree:\n${commands}")
    endif()
  endforeach()
endif()

# 5. Every program loads libtessera (and libtessera_fortran) from the prefix, and with
#    the CUDA backend no CUDA library at start-up. A static libtessera is linked in.
file(STRINGS "${build}/programs.txt" programs)
list(LENGTH programs n_programs)
if(n_programs EQUAL 0)
  message(FATAL_ERROR "install_tests: no program was built (${build}/programs.txt is empty)")
endif()
if(TESSERA_SHARED)
  set(no_cuda)
  if(TESSERA_HAVE_CUDA)
    set(no_cuda NO_CUDA)
  endif()
  foreach(program IN LISTS programs)
    check_ldd(PROGRAM "${program}" PREFIX "${prefix}" ${no_cuda})
  endforeach()
  message(STATUS "install_tests: the ${n_programs} programs load libtessera from ${prefix}")
else()
  message(STATUS "install_tests: no ldd check (a static libtessera is linked into the programs)")
endif()

# 6. Run the tests (TESTS_REGEX, if set, picks some).
set(select)
if(BUILD_CONFIG)
  list(APPEND select -C "${BUILD_CONFIG}")
endif()
if(TESTS_REGEX)
  set(select -R "${TESTS_REGEX}")
endif()
if(NOT PARALLEL)
  set(PARALLEL 2)
endif()
run_step(NAME ctest
         COMMAND "${CTEST}" --test-dir "${build}" --output-on-failure --no-tests=error
                 --parallel ${PARALLEL} ${select})
message(STATUS "${STEP_OUTPUT}")
