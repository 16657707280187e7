// libFuzzer target: the bytes as a safetensors file -> io::SafetensorsFile (the 8-byte
// header length, the JSON header: dtypes, shapes, offsets, __metadata__) and a read of
// every tensor it lists, as stored and converted to f32 (docs/fuzzing.md).
//
// Expected outcomes: the file is accepted and every tensor reads, or a tessera::Error
// (IoError, InvalidArgument) says why not. A finding is any other exception, a crash or
// a sanitizer report, or an accepted tensor whose byte range lies outside the file.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "tessera/error.hpp"
#include "tessera/io/safetensors.hpp"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_safetensors: FINDING: %s: %s\n", what, detail.c_str());
  std::abort();
}

const std::string& scratch_path() {
  static const std::string path = "/tmp/tessera-fuzz-safetensors-" + std::to_string(::getpid()) + ".safetensors";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = scratch_path();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) finding("cannot write the scratch file", path);
    if (size > 0 && std::fwrite(data, 1, size, f) != size) finding("short write of the scratch file", path);
    std::fclose(f);
  }
  try {
    const tessera::io::SafetensorsFile file(path);
    for (const tessera::io::SafetensorsEntry& e : file.tensors()) {
      try {
        (void)file.read(e);
      } catch (const tessera::Error&) {
        // a dtype tessera keeps only when converting: fine
      }
      (void)file.read(e, tessera::DType::f32);
    }
  } catch (const tessera::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  } catch (const std::exception& e) {
    finding("non-tessera exception from the safetensors reader", e.what());
  } catch (...) {
    finding("non-std exception from the safetensors reader", "(unknown type)");
  }
  return 0;
}
