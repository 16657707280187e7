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

# --- OpenBLAS (host GEMM) ----------------------------------------------------
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(TESSERA_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas
          PATHS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu)
if(NOT TESSERA_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "cblas.h (OpenBLAS) not found. ${_tessera_hint}")
endif()

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
if(TESSERA_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET CUDA::cublas)
    message(FATAL_ERROR "cuBLAS not found in the CUDA toolkit at ${CUDAToolkit_LIBRARY_ROOT}.")
  endif()
  find_package(NCCL REQUIRED)
endif()
