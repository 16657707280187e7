# Steps shared by the drivers of the install tests (run_consumer.cmake,
# run_installed_tests.cmake; cmake -P scripts). The including script sets INSTALL_TEST,
# the test's name, which every error message starts with.

# run_step(NAME name COMMAND ...): runs the command; on failure stops the test with its
# output. Its stdout is left in STEP_OUTPUT; its duration is printed (the install tests'
# run time is part of every CI run, so each step's share is worth seeing).
function(run_step)
  cmake_parse_arguments(S "" "NAME" "COMMAND" ${ARGN})
  string(REPLACE ";" " " shown "${S_COMMAND}")
  message(STATUS "[${S_NAME}] ${shown}")
  string(TIMESTAMP start "%s")
  execute_process(COMMAND ${S_COMMAND}
                  RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  string(TIMESTAMP end "%s")
  math(EXPR seconds "${end} - ${start}")
  message(STATUS "[${S_NAME}] ${seconds} s")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${INSTALL_TEST}: step '${S_NAME}' failed (exit status ${rc})\n"
                        "command: ${shown}\n--- stdout ---\n${out}--- stderr ---\n${err}")
  endif()
  set(STEP_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

function(expect_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "${INSTALL_TEST}: the install tree lacks ${path}")
  endif()
endfunction()

# install_tessera(BUILD_DIR dir PREFIX prefix [CONFIG config]): installs the build tree
# into the prefix and sets TESSERA_PACKAGE_DIR to the directory of the one
# tesseraConfig.cmake there.
function(install_tessera)
  cmake_parse_arguments(I "" "BUILD_DIR;PREFIX;CONFIG" "" ${ARGN})
  set(config_args)
  if(I_CONFIG)
    set(config_args --config "${I_CONFIG}")
  endif()
  run_step(NAME install
           COMMAND "${CMAKE_COMMAND}" --install "${I_BUILD_DIR}" --prefix "${I_PREFIX}" ${config_args})
  file(GLOB_RECURSE package_configs "${I_PREFIX}/*/tesseraConfig.cmake")
  list(LENGTH package_configs n_configs)
  if(NOT n_configs EQUAL 1)
    message(FATAL_ERROR "${INSTALL_TEST}: expected one tesseraConfig.cmake under ${I_PREFIX}, "
                        "found: ${package_configs}")
  endif()
  get_filename_component(package_dir "${package_configs}" DIRECTORY)
  set(TESSERA_PACKAGE_DIR "${package_dir}" PARENT_SCOPE)
endfunction()

# toolchain_args(<out> <language>...): the -D arguments that give a downstream project the
# tessera build's toolchain for those languages, from the driver's variables: the build
# type (BUILD_CONFIG), the compilers (<lang>_COMPILER), MPI's wrappers (MPI_<lang>_COMPILER),
# the compiler launchers (CMAKE_<lang>_COMPILER_LAUNCHER: ccache keeps a second build of
# the same sources cheap) and the CUDA toolkit (CUDA_ROOT; a static libtessera with the
# CUDA backend makes the project find it).
function(toolchain_args out)
  set(args)
  if(BUILD_CONFIG)
    list(APPEND args "-DCMAKE_BUILD_TYPE=${BUILD_CONFIG}")
  endif()
  foreach(lang IN LISTS ARGN)
    foreach(pair "${lang}_COMPILER=CMAKE_${lang}_COMPILER" "MPI_${lang}_COMPILER=MPI_${lang}_COMPILER"
                 "CMAKE_${lang}_COMPILER_LAUNCHER=CMAKE_${lang}_COMPILER_LAUNCHER")
      string(REPLACE "=" ";" pair "${pair}")
      list(GET pair 0 from)
      list(GET pair 1 to)
      if(${from})
        list(APPEND args "-D${to}=${${from}}")
      endif()
    endforeach()
  endforeach()
  if(CUDA_ROOT)
    list(APPEND args "-DCUDAToolkit_ROOT=${CUDA_ROOT}")
  endif()
  set(${out} "${args}" PARENT_SCOPE)
endfunction()

# check_ldd(PROGRAM program [PREFIX prefix] [NO_CUDA]): `ldd` (every library the loader
# maps at start-up) lists libtessera for the program; with PREFIX, every libtessera*
# resolves to a file under the prefix (a consumer of the install never loads the build
# tree's library); with NO_CUDA, no CUDA library is mapped (the CUDA backend is the
# plugin libtessera_cuda.so, loaded only when a device is asked for; docs/gpu.md,
# "Packaging"). Prints the program's libtessera lines as the evidence.
function(check_ldd)
  cmake_parse_arguments(L "NO_CUDA" "PROGRAM;PREFIX" "" ${ARGN})
  find_program(LDD ldd REQUIRED)
  execute_process(COMMAND "${LDD}" "${L_PROGRAM}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${INSTALL_TEST}: ldd ${L_PROGRAM} failed (exit status ${rc})\n${out}${err}")
  endif()
  string(REGEX MATCHALL "libtessera[^ \t\n]* => [^ \n]*" tessera_lines "${out}")
  if(NOT tessera_lines)
    message(FATAL_ERROR "${INSTALL_TEST}: ldd ${L_PROGRAM} does not list libtessera:\n${out}")
  endif()
  if(L_PREFIX)
    get_filename_component(prefix "${L_PREFIX}" REALPATH)
    foreach(line IN LISTS tessera_lines)
      string(REGEX REPLACE "^.* => " "" path "${line}")
      get_filename_component(path "${path}" REALPATH)
      string(FIND "${path}" "${prefix}/" at)
      if(NOT at EQUAL 0)
        message(FATAL_ERROR "${INSTALL_TEST}: ${L_PROGRAM} loads a libtessera from outside "
                            "the install prefix ${prefix}: ${line}\n${out}")
      endif()
    endforeach()
  endif()
  if(L_NO_CUDA AND out MATCHES "(libcuda|libcudart|libcublas|libnccl|libtessera_cuda)[^ ]*")
    message(FATAL_ERROR "${INSTALL_TEST}: the CPU program ${L_PROGRAM} loads ${CMAKE_MATCH_0} at "
                        "start-up; only the CUDA plugin may link it\n${out}")
  endif()
  get_filename_component(name "${L_PROGRAM}" NAME)
  string(REPLACE ";" "; " shown "${tessera_lines}")
  message(STATUS "ldd ${name}: ${shown}")
endfunction()
