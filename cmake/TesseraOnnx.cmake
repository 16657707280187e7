# The ONNX importer's file reader (TESSERA_ENABLE_ONNX=AUTO|ON|OFF).
#
# Only src/onnx/onnx_file.cpp parses ONNX files, through the protobuf classes Debian's
# libonnx-dev ships (target onnx_proto). Those classes' headers include protobuf's own,
# which come with libprotobuf-dev: Debian's libonnx-dev does not depend on it, so both
# are looked for and both are named when missing. Without them the library is built with
# src/onnx/onnx_file_unavailable.cpp instead, whose load_onnx says how to get ONNX
# support. Sets TESSERA_HAVE_ONNX (also as a global property for the tests' directory).
set(TESSERA_HAVE_ONNX OFF)
if(NOT TESSERA_ENABLE_ONNX STREQUAL "OFF")
  find_package(ONNX CONFIG QUIET)
  find_package(Protobuf QUIET)
  set(_tessera_onnx_missing)
  if(NOT ONNX_FOUND OR NOT TARGET onnx_proto)
    list(APPEND _tessera_onnx_missing "ONNX's protobuf classes (Debian: libonnx-dev)")
  endif()
  if(NOT Protobuf_FOUND OR NOT TARGET protobuf::libprotobuf)
    list(APPEND _tessera_onnx_missing "protobuf's C++ headers and library (Debian: libprotobuf-dev)")
  endif()
  if(NOT _tessera_onnx_missing)
    set(TESSERA_HAVE_ONNX ON)
  elseif(TESSERA_ENABLE_ONNX STREQUAL "ON")
    string(REPLACE ";" " and " _tessera_onnx_missing "${_tessera_onnx_missing}")
    message(FATAL_ERROR "TESSERA_ENABLE_ONNX=ON but ${_tessera_onnx_missing} were not found: install "
                        "libonnx-dev and libprotobuf-dev (scripts/install-deps does), or configure with "
                        "-DTESSERA_ENABLE_ONNX=OFF.")
  else()
    message(STATUS "ONNX not found (${_tessera_onnx_missing}): tessera is built without the ONNX importer")
  endif()
endif()
set_property(GLOBAL PROPERTY TESSERA_HAVE_ONNX ${TESSERA_HAVE_ONNX})
