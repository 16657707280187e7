# TESSERA_SANITIZE: AddressSanitizer + UndefinedBehaviorSanitizer on every target.
#
# Included by the top-level CMakeLists.txt right after the options, so the flags reach
# every target defined after it (the library, tools, tests, examples, benchmarks and
# the fuzzers): C and C++ sources are compiled, and every executable and shared library
# is linked, with
#
#   -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
#
# so the first UBSan report stops the program (a test that trips one fails). The
# `sanitize` preset (CMakePresets.json) builds with clang-14 and sets ASAN_OPTIONS /
# UBSAN_OPTIONS for its tests; docs/fuzzing.md has the details.
#
# Fortran and CUDA sources are not instrumented: gfortran's -fsanitize uses GCC's libasan,
# which cannot share a process with clang's ASan runtime, and nvcc does not take the
# flags. The sanitize preset builds neither.

if(NOT TESSERA_SANITIZE)
  return()
endif()

if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang|GNU")
  message(FATAL_ERROR "TESSERA_SANITIZE=ON needs clang or GCC (found ${CMAKE_CXX_COMPILER_ID}).")
endif()

set(TESSERA_SANITIZER_FLAGS
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)

add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${TESSERA_SANITIZER_FLAGS}>")
add_link_options(${TESSERA_SANITIZER_FLAGS})

# A C program that links the (C++) libtessera, e.g. tests/capi/test_capi.c, is linked by
# the C driver, which by default leaves out the sanitizers' C++ runtime parts (operator
# new/delete interposition, the UBSan vptr check's handlers) that libtessera needs; those
# parts in turn need libstdc++ (__dynamic_cast, type_info).
if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_link_options("$<$<LINK_LANGUAGE:C>:-fsanitize-link-c++-runtime;-lstdc++>")
endif()

# An instrumented libtessera needs the sanitizer runtimes in the executable that loads it,
# so linking them is a usage requirement of the library, also for projects that use an
# installed tessera through find_package (tests/install's consumer). Set once the
# top-level directory has defined the target.
function(_tessera_sanitize_usage_requirements)
  if(TARGET tessera)
    target_link_options(tessera INTERFACE -fsanitize=address,undefined
                        "$<$<AND:$<C_COMPILER_ID:Clang>,$<LINK_LANGUAGE:C>>:-fsanitize-link-c++-runtime;-lstdc++>")
  endif()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _tessera_sanitize_usage_requirements)

message(STATUS "Sanitizers: ASan + UBSan on every C/C++ target (TESSERA_SANITIZE=ON)")
