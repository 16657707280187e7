# Install rules and the CMake package, so that a downstream project can do
#
#   find_package(tessera CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE tessera::tessera)
#
# after `cmake --install <build> --prefix <prefix>` (with <prefix> on CMAKE_PREFIX_PATH).
#
# Layout under the prefix:
#   include/tessera/*.hpp, detail/   public headers (version.hpp is the generated one)
#   lib/libtessera.so*               the library (links no CUDA library)
#   lib/libtessera_cuda.so           the CUDA backend plugin, loaded on the first device
#                                    request (src/backend/cuda_plugin.hpp; CUDA builds)
#   lib/cmake/tessera/               tesseraConfig.cmake, version file, targets, FindNCCL
#   bin/                             tessera-run, tessera-ckpt, examples, benchmarks
#   share/tessera/configs/           the example parallelism configs

include(CMakePackageConfigHelpers)

set(TESSERA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/tessera" CACHE STRING
    "Where the tessera CMake package files are installed, relative to the prefix")
mark_as_advanced(TESSERA_INSTALL_CMAKEDIR)

# --- RPATH -------------------------------------------------------------------
# Installed programs find libtessera relative to themselves ($ORIGIN), so the prefix can
# be chosen at install time (`cmake --install build --prefix ...`) and moved afterwards.
# Link directories outside the system paths (the CUDA toolkit, a custom MPI) are kept
# too, so libtessera finds its own dependencies without LD_LIBRARY_PATH.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_tessera_rpath_lib "${CMAKE_INSTALL_LIBDIR}")
  set(_tessera_rpath_bin "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _tessera_bin_to_lib "/prefix/${CMAKE_INSTALL_BINDIR}"
       "/prefix/${CMAKE_INSTALL_LIBDIR}")
  set(_tessera_rpath_lib "$ORIGIN")
  set(_tessera_rpath_bin "$ORIGIN/${_tessera_bin_to_lib}")
endif()

set_target_properties(tessera PROPERTIES
  INSTALL_RPATH "${_tessera_rpath_lib}"
  INSTALL_RPATH_USE_LINK_PATH TRUE)

get_property(_tessera_programs GLOBAL PROPERTY TESSERA_INSTALL_PROGRAMS)
foreach(_program IN LISTS _tessera_programs)
  set_target_properties(${_program} PROPERTIES
    INSTALL_RPATH "${_tessera_rpath_bin}"
    INSTALL_RPATH_USE_LINK_PATH TRUE)
endforeach()

# --- library and headers -----------------------------------------------------
set(_tessera_export_targets tessera)
if(NOT BUILD_SHARED_LIBS AND TARGET tessera_hdf5)
  # A static libtessera carries its private dependencies into the export; the fallback
  # HDF5 interface target (used when FindHDF5 gives no hdf5::hdf5) must travel with it.
  list(APPEND _tessera_export_targets tessera_hdf5)
endif()

install(TARGETS ${_tessera_export_targets}
  EXPORT tesseraTargets
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

# Headers only: version.hpp.in stays behind, the generated version.hpp goes instead.
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/tessera/"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/tessera"
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES "${PROJECT_BINARY_DIR}/include/tessera/version.hpp"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/tessera")

# --- programs and data -------------------------------------------------------
if(_tessera_programs)
  install(TARGETS ${_tessera_programs} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()
install(DIRECTORY "${PROJECT_SOURCE_DIR}/data/configs/"
  DESTINATION "${CMAKE_INSTALL_DATADIR}/tessera/configs"
  FILES_MATCHING PATTERN "*.yaml")

# --- CMake package -----------------------------------------------------------
install(EXPORT tesseraTargets
  NAMESPACE tessera::
  FILE tesseraTargets.cmake
  DESTINATION "${TESSERA_INSTALL_CMAKEDIR}")

# Values the config file needs to find the same dependencies again.
set(TESSERA_CONFIG_SHARED ${BUILD_SHARED_LIBS})
set(TESSERA_CONFIG_CUDA ${TESSERA_HAVE_CUDA})
set(TESSERA_CONFIG_NCCL ${TESSERA_HAVE_NCCL})
set(TESSERA_CONFIG_BLA_VENDOR "${BLA_VENDOR}")

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/TesseraConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/tesseraConfig.cmake"
  INSTALL_DESTINATION "${TESSERA_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/tesseraConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)

install(FILES
  "${PROJECT_BINARY_DIR}/cmake/tesseraConfig.cmake"
  "${PROJECT_BINARY_DIR}/cmake/tesseraConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake"
  DESTINATION "${TESSERA_INSTALL_CMAKEDIR}")

# --- pkg-config, for codes built with make: tessera.pc (C and C++) and, with the
# Fortran module, tessera-fortran.pc. Only for a shared libtessera, which carries its own
# dependencies (a static one needs find_package(tessera) to bring them).
if(BUILD_SHARED_LIBS)
  file(RELATIVE_PATH TESSERA_PC_UP "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" TESSERA_PC_UP "${TESSERA_PC_UP}")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/tessera.pc.in" "${PROJECT_BINARY_DIR}/pkgconfig/tessera.pc" @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/tessera.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  if(TARGET tessera_fortran)
    set(TESSERA_PC_FORTRAN_MODULE_DIR "${TESSERA_FORTRAN_MODULE_INSTALL_DIR}")
    configure_file("${PROJECT_SOURCE_DIR}/cmake/tessera-fortran.pc.in"
                   "${PROJECT_BINARY_DIR}/pkgconfig/tessera-fortran.pc" @ONLY)
    install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/tessera-fortran.pc"
            DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  endif()
endif()
