# Finds everything tessera builds against. Each failure says what to install.

set(_tessera_hint "Run scripts/install-deps (as root) to install the Debian 12 packages.")

# --- MPI (MPICH) -------------------------------------------------------------
set(_mpi_components C CXX)
if(TESSERA_HAVE_FORTRAN)
  list(APPEND _mpi_components Fortran)
endif()
find_package(MPI REQUIRED COMPONENTS ${_mpi_components})
if(NOT MPI_FOUND)
  message(FATAL_ERROR "MPI not found. ${_tessera_hint}")
endif()

# --- parallel HDF5 -----------------------------------------------------------
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR
    "HDF5 was found (${HDF5_C_INCLUDE_DIRS}) but it is the serial build. tessera's shared "
    "checkpoints need parallel HDF5 (MPI-IO). On Debian install libhdf5-mpich-dev, or point "
    "HDF5_ROOT / HDF5_C_COMPILER_EXECUTABLE at an h5pcc built with MPI. ${_tessera_hint}")
endif()
if(NOT TARGET hdf5::hdf5)
  add_library(tessera_hdf5 INTERFACE)
  target_include_directories(tessera_hdf5 INTERFACE ${HDF5_C_INCLUDE_DIRS})
  target_link_libraries(tessera_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
  target_compile_definitions(tessera_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})
  set(TESSERA_HDF5_TARGET tessera_hdf5)
else()
  set(TESSERA_HDF5_TARGET hdf5::hdf5)
endif()

# --- BLAS (host GEMM) ------------------------------------------------------------
# Any CBLAS works. Without BLA_VENDOR, OpenBLAS is preferred (tessera then sets each
# rank's share of its threads) and any other BLAS CMake's FindBLAS knows is taken
# otherwise; -DBLA_VENDOR=Intel10_64lp / FLAME / Generic / ... picks one. The CBLAS
# header is found next to the library or on CMAKE_PREFIX_PATH; set
# TESSERA_CBLAS_INCLUDE_DIR to point at it, and TESSERA_CBLAS_HEADER=mkl_cblas.h for MKL.
set(TESSERA_CBLAS_HEADER "cblas.h" CACHE STRING "The CBLAS header to include (mkl_cblas.h for MKL)")
if(NOT DEFINED BLA_VENDOR AND NOT DEFINED ENV{BLA_VENDOR})
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS QUIET)
  if(NOT BLAS_FOUND)
    unset(BLA_VENDOR)
    message(STATUS "OpenBLAS not found; looking for any BLAS")
  endif()
endif()
if(NOT BLAS_FOUND)
  find_package(BLAS)
endif()
if(NOT BLAS_FOUND)
  message(FATAL_ERROR "No BLAS library found (BLA_VENDOR='${BLA_VENDOR}'). Install one (OpenBLAS, MKL, BLIS, "
                      "the reference BLAS), or set BLAS_LIBRARIES. ${_tessera_hint}")
endif()
set(TESSERA_BLAS_IS_OPENBLAS OFF)
if(BLAS_LIBRARIES MATCHES "openblas" OR BLA_VENDOR STREQUAL "OpenBLAS")
  set(TESSERA_BLAS_IS_OPENBLAS ON)
endif()
set(_cblas_hints)
foreach(_lib IN LISTS BLAS_LIBRARIES)
  if(IS_ABSOLUTE "${_lib}")
    get_filename_component(_dir "${_lib}" DIRECTORY)
    list(APPEND _cblas_hints "${_dir}/../include" "${_dir}/../../include")
  endif()
endforeach()
find_path(TESSERA_CBLAS_INCLUDE_DIR ${TESSERA_CBLAS_HEADER}
          HINTS ${_cblas_hints} ENV MKLROOT
          PATH_SUFFIXES openblas openblas-pthread include include/mkl
          PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE})
if(NOT TESSERA_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "${TESSERA_CBLAS_HEADER} not found for the BLAS at '${BLAS_LIBRARIES}'. Set "
                      "TESSERA_CBLAS_INCLUDE_DIR to its folder (and TESSERA_CBLAS_HEADER for MKL's "
                      "mkl_cblas.h). ${_tessera_hint}")
endif()
message(STATUS "BLAS: ${BLAS_LIBRARIES} (${TESSERA_CBLAS_INCLUDE_DIR}/${TESSERA_CBLAS_HEADER}; "
               "OpenBLAS thread control ${TESSERA_BLAS_IS_OPENBLAS})")

# --- yaml-cpp ----------------------------------------------------------------
find_package(yaml-cpp REQUIRED)
if(TARGET yaml-cpp::yaml-cpp)
  set(TESSERA_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(TESSERA_YAML_TARGET yaml-cpp)
endif()

# --- test and benchmark frameworks -------------------------------------------
if(TESSERA_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TESSERA_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# --- CUDA toolkit, cuBLAS, NCCL ----------------------------------------------
set(TESSERA_HAVE_NCCL OFF)
if(TESSERA_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET CUDA::cublas)
    message(FATAL_ERROR "cuBLAS not found in the CUDA toolkit at ${CUDAToolkit_LIBRARY_ROOT}.")
  endif()
  # NCCL is optional: without it, CUDA tensors' collectives go through MPI (directly
  # when MPI is CUDA-aware, staged through pinned host memory otherwise).
  if(NOT TESSERA_ENABLE_NCCL STREQUAL "OFF")
    find_package(NCCL)
    if(NCCL_FOUND)
      set(TESSERA_HAVE_NCCL ON)
    elseif(TESSERA_ENABLE_NCCL STREQUAL "ON")
      message(FATAL_ERROR "TESSERA_ENABLE_NCCL=ON but NCCL was not found: set NCCL_ROOT to its prefix "
                          "(include/nccl.h, lib/libnccl.so), or configure with -DTESSERA_ENABLE_NCCL=OFF.")
    else()
      message(STATUS "NCCL not found: CUDA collectives will go through MPI (set NCCL_ROOT to use NCCL)")
    endif()
  endif()
endif()
