# netCDF-4 / CF input and output of tessera-run (TESSERA_ENABLE_NETCDF=AUTO|ON|OFF).
#
# tessera reads and writes netCDF-4 through the parallel HDF5 it already links, in
# netCDF's conventions (dimension scales), rather than through netCDF-C: Debian's
# parallel netCDF-C (libnetcdf-mpi) is built against Open MPI and its serial one
# against serial HDF5, and either would put a second MPI or a second HDF5 into an MPICH
# process (docs/driver.md, "Why HDF5 and not netCDF-C"). The one extra library is HDF5's
# own high-level dimension-scale API (hdf5_hl), looked for next to the HDF5 library that
# was found, so that it is the same build. Sets TESSERA_HAVE_NETCDF and
# TESSERA_HDF5_HL_LIBRARY.
set(TESSERA_HAVE_NETCDF OFF)
if(NOT TESSERA_ENABLE_NETCDF STREQUAL "OFF")
  set(_tessera_hdf5_dirs)
  foreach(_lib IN LISTS HDF5_C_LIBRARIES HDF5_LIBRARIES)
    if(_lib MATCHES "hdf5[^/]*\\.(so|a|dylib)$")
      get_filename_component(_dir "${_lib}" DIRECTORY)
      list(APPEND _tessera_hdf5_dirs "${_dir}")
    endif()
  endforeach()
  if(HDF5_C_HL_LIBRARIES)
    set(TESSERA_HDF5_HL_LIBRARY "${HDF5_C_HL_LIBRARIES}" CACHE FILEPATH "HDF5's high-level library")
  elseif(_tessera_hdf5_dirs)
    find_library(TESSERA_HDF5_HL_LIBRARY NAMES hdf5_hl HINTS ${_tessera_hdf5_dirs} NO_DEFAULT_PATH)
  endif()
  if(TESSERA_HDF5_HL_LIBRARY)
    set(TESSERA_HAVE_NETCDF ON)
  elseif(TESSERA_ENABLE_NETCDF STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_ENABLE_NETCDF=ON but HDF5's high-level library (hdf5_hl) was not found next to "
                        "${_tessera_hdf5_dirs}: install the HDF5 build's hl part, set TESSERA_HDF5_HL_LIBRARY, or "
                        "configure with -DTESSERA_ENABLE_NETCDF=OFF.")
  else()
    message(STATUS "hdf5_hl not found: tessera-run is built without netCDF input and output")
  endif()
endif()
# For the tests' directory (another scope).
set_property(GLOBAL PROPERTY TESSERA_HAVE_NETCDF ${TESSERA_HAVE_NETCDF})
