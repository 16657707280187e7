# Driver of the install_consumer test (cmake -P). See tests/install/CMakeLists.txt.
# Any failing step stops the test with that step's full output.

cmake_minimum_required(VERSION 3.25)

foreach(var TESSERA_BUILD_DIR WORK_DIR CONSUMER_SOURCE_DIR EXPECTED_VERSION GENERATOR
            CXX_COMPILER MPIEXEC)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT NUMPROC_FLAG)
  set(NUMPROC_FLAG -n)
endif()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(INSTALL_TEST install_consumer)
include("${CMAKE_CURRENT_LIST_DIR}/install_steps.cmake")

# 1. Install the build tree into a private prefix.
set(config_args)
if(BUILD_CONFIG)
  set(config_args --config "${BUILD_CONFIG}")
endif()
install_tessera(BUILD_DIR "${TESSERA_BUILD_DIR}" PREFIX "${prefix}" CONFIG "${BUILD_CONFIG}")
set(package_dir "${TESSERA_PACKAGE_DIR}")
expect_file("${package_dir}/tesseraConfigVersion.cmake")
expect_file("${package_dir}/tesseraTargets.cmake")
expect_file("${package_dir}/FindNCCL.cmake")
expect_file("${prefix}/include/tessera/tessera.hpp")
expect_file("${prefix}/include/tessera/version.hpp")
expect_file("${prefix}/include/tessera/detail/strided_index.hpp")
if(EXISTS "${prefix}/include/tessera/version.hpp.in")
  message(FATAL_ERROR "install_consumer: version.hpp.in must not be installed")
endif()

# 2. Configure the consumer against the prefix only: no package registry, and the
#    build tree is nowhere on the search path.
set(configure_args
  -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" -G "${GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  "-DEXPECTED_TESSERA_DIR=${package_dir}"
  "-DEXPECTED_VERSION=${EXPECTED_VERSION}"
  "-DTESSERA_SHARED=${TESSERA_SHARED}")
toolchain_args(toolchain C CXX)
list(APPEND configure_args ${toolchain})
run_step(NAME configure COMMAND "${CMAKE_COMMAND}" ${configure_args})

# 3. Build it.
run_step(NAME build COMMAND "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

# 4. Run it on two ranks: a Mesh with tensor 2 and one all_reduce.
set(consumer_exe "${consumer_build}/tessera_consumer")
if(NOT EXISTS "${consumer_exe}" AND BUILD_CONFIG)
  set(consumer_exe "${consumer_build}/${BUILD_CONFIG}/tessera_consumer")
endif()
run_step(NAME run COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} 2 "${consumer_exe}")
set(expected "tessera ${EXPECTED_VERSION}: 2 ranks, mesh {data: none, tensor: 2, domain: 1}
rank 0 dp 0 tp 0 domain 0
rank 1 dp 0 tp 1 domain 0
tp all_reduce sum: 3
consumer: OK
")
if(NOT STEP_OUTPUT STREQUAL expected)
  message(FATAL_ERROR "install_consumer: unexpected consumer output\n"
                      "--- expected ---\n${expected}--- got ---\n${STEP_OUTPUT}")
endif()

# 5. The installed example runs from the prefix (its RPATH finds the installed library).
if(WITH_PROGRAMS)
  expect_file("${prefix}/bin/mesh_info")
  file(WRITE "${WORK_DIR}/tp2.yaml" "parallelism: {tensor: 2}\n")
  run_step(NAME installed_mesh_info
           COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} 2 "${prefix}/bin/mesh_info"
                   "${WORK_DIR}/tp2.yaml")
  set(expected_lines "rank 0 dp 0 tp 0 domain 0\nrank 1 dp 0 tp 1 domain 0\n")
  if(NOT STEP_OUTPUT STREQUAL expected_lines)
    message(FATAL_ERROR "install_consumer: unexpected output from the installed mesh_info\n"
                        "--- expected ---\n${expected_lines}--- got ---\n${STEP_OUTPUT}")
  endif()
endif()

# 6. Projects in one language only: C (consumer_c/) and Fortran (consumer_fortran/),
# each configured, built and run against the prefix (shared builds).
if(TESSERA_SHARED)
  foreach(language C Fortran)
    string(TOLOWER "${language}" lower)
    if(language STREQUAL "Fortran" AND NOT MPI_Fortran_COMPILER)
      continue()
    endif()
    set(build_dir "${WORK_DIR}/consumer_${lower}-build")
    file(REMOVE_RECURSE "${build_dir}")
    set(args -S "${CONSUMER_SOURCE_DIR}/../consumer_${lower}" -B "${build_dir}" -G "${GENERATOR}"
             "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
    if(language STREQUAL "C" AND C_COMPILER)
      list(APPEND args "-DCMAKE_C_COMPILER=${C_COMPILER}")
    endif()
    run_step(NAME configure_${lower}_only COMMAND "${CMAKE_COMMAND}" ${args})
    run_step(NAME build_${lower}_only COMMAND "${CMAKE_COMMAND}" --build "${build_dir}")
    run_step(NAME run_${lower}_only COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} 2 "${build_dir}/${lower}_consumer")
    if(NOT STEP_OUTPUT MATCHES "${language} consumer: 2 ranks, sum 48")
      message(FATAL_ERROR "install_consumer: unexpected output of the ${language}-only project\n${STEP_OUTPUT}")
    endif()
  endforeach()
endif()

# 7. pkg-config, as a Makefile-based code would use it: compile with MPI's wrapper and
# the flags pkg-config gives, run on two ranks (shared builds install tessera.pc).
# A sanitized libtessera needs the sanitizer runtime of its compiler in the program: the
# find_package consumers get it through the exported link options, pkg-config's flags
# do not carry it, so the sanitize preset skips this step.
find_program(PKG_CONFIG pkg-config)
if(TESSERA_SHARED AND PKG_CONFIG AND MPI_C_COMPILER AND NOT TESSERA_SANITIZE)
  set(ENV{PKG_CONFIG_PATH} "")
  file(GLOB_RECURSE pc_files "${prefix}/*/pkgconfig/tessera.pc")
  list(LENGTH pc_files n_pc)
  if(NOT n_pc EQUAL 1)
    message(FATAL_ERROR "install_consumer: expected one tessera.pc under ${prefix}, found: ${pc_files}")
  endif()
  get_filename_component(pc_dir "${pc_files}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  foreach(language C Fortran)
    if(language STREQUAL "C")
      set(package tessera)
      set(compiler "${MPI_C_COMPILER}")
      set(source "${CONSUMER_SOURCE_DIR}/pkgconfig_consumer.c")
    else()
      set(package tessera-fortran)
      set(compiler "${MPI_Fortran_COMPILER}")
      set(source "${CONSUMER_SOURCE_DIR}/pkgconfig_consumer.f90")
      if(NOT compiler OR NOT EXISTS "${pc_dir}/tessera-fortran.pc")
        continue()
      endif()
    endif()
    run_step(NAME pkgconfig_flags_${language} COMMAND "${PKG_CONFIG}" --cflags --libs ${package})
    separate_arguments(pc_flags UNIX_COMMAND "${STEP_OUTPUT}")
    set(exe "${WORK_DIR}/pkgconfig_consumer_${language}")
    run_step(NAME pkgconfig_build_${language} COMMAND "${compiler}" "${source}" ${pc_flags} -o "${exe}")
    run_step(NAME pkgconfig_run_${language} COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} 2 "${exe}")
    if(NOT STEP_OUTPUT MATCHES "${language} consumer: 2 ranks, sum 48")
      message(FATAL_ERROR "install_consumer: unexpected output of the ${language} pkg-config consumer\n${STEP_OUTPUT}")
    endif()
  endforeach()
endif()

# 8. A CPU consumer of a CUDA-enabled install links no CUDA library: the CUDA backend is
# the plugin lib/libtessera_cuda.so, loaded only when a device is asked for
# (docs/gpu.md, "Packaging"). `ldd` lists every library the loader maps at start-up.
if(NOT TESSERA_HAVE_CUDA)
  message(STATUS "install_consumer: no CUDA library check (this build has no CUDA backend)")
elseif(NOT TESSERA_SHARED)
  message(STATUS "install_consumer: no CUDA library check (a static libtessera has the CUDA backend linked in)")
else()
  file(GLOB_RECURSE plugins "${prefix}/*/libtessera_cuda.so")
  if(NOT plugins)
    message(FATAL_ERROR "install_consumer: the install tree lacks the CUDA plugin libtessera_cuda.so")
  endif()
  set(cpu_consumers "${consumer_exe}")
  if(EXISTS "${WORK_DIR}/consumer_c-build/c_consumer")
    list(APPEND cpu_consumers "${WORK_DIR}/consumer_c-build/c_consumer")
  endif()
  foreach(program IN LISTS cpu_consumers)
    check_ldd(PROGRAM "${program}" PREFIX "${prefix}" NO_CUDA)
  endforeach()
  message(STATUS "install_consumer: no CUDA library in ldd of ${cpu_consumers}")
endif()

message(STATUS "install_consumer: find_package(tessera) from ${package_dir} works")
