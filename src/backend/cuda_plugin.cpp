// libtessera's side of the CUDA plugin (cuda_plugin.hpp): finding and loading
// libtessera_cuda.so, and the public CUDA queries, which load it on first use. A build
// without the CUDA backend compiles the same entry points to "built without CUDA".

#include "backend/cuda_plugin.hpp"

#include <string>

#include "backend/registry.hpp"
#include "tessera/backend.hpp"
#include "tessera/error.hpp"
#include "tessera/version.hpp"

#if TESSERA_HAVE_CUDA && !defined(TESSERA_CUDA_LINKED_IN)
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#endif

namespace tessera {
namespace detail {
namespace {

constexpr const char* kNotBuilt =
    "tessera was built without the CUDA backend (reconfigure with nvcc on PATH or -DTESSERA_ENABLE_CUDA=ON)";

#if TESSERA_HAVE_CUDA && !defined(TESSERA_CUDA_LINKED_IN)
constexpr const char* kPluginFile = "libtessera_cuda.so";

// $TESSERA_CUDA_PLUGIN, else the plugin beside the libtessera this function lives in,
// else the bare name for the dynamic loader's own search.
std::string plugin_path() {
  if (const char* path = std::getenv("TESSERA_CUDA_PLUGIN"); path != nullptr && *path != '\0') return path;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&plugin_path), &info) != 0 && info.dli_fname != nullptr) {
    const std::filesystem::path library(info.dli_fname);
    if (library.has_parent_path()) return (library.parent_path() / kPluginFile).string();
  }
  return kPluginFile;
}

struct Loaded {
  const CudaPlugin* plugin = nullptr;
  std::string error;  // why plugin is null
};

Loaded load() {
  const std::string path = plugin_path();
  const std::string failed = "the CUDA backend plugin " + path + " could not be loaded: ";
  // RTLD_LOCAL: nothing but the entry point is looked up in it; the plugin's own
  // references to libtessera resolve to the already loaded library.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return {nullptr, failed + (why != nullptr ? why : "unknown dlopen error") +
                         " (set TESSERA_CUDA_PLUGIN to the file's path)"};
  }
  // Never dlclose'd: the backend's singletons and CUDA's own atexit handlers live in it.
  using Entry = const CudaPlugin* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "tessera_cuda_plugin"));
  if (entry == nullptr) {
    const char* why = dlerror();
    return {nullptr, failed + "no tessera_cuda_plugin entry point (" + (why != nullptr ? why : "") + ")"};
  }
  const CudaPlugin* plugin = entry();
  if (plugin == nullptr || std::string(plugin->version) != TESSERA_VERSION_STRING) {
    return {nullptr, failed + "it was built for tessera " + (plugin != nullptr ? plugin->version : "?") +
                         ", this libtessera is " + TESSERA_VERSION_STRING};
  }
  return {plugin, {}};
}

const Loaded& loaded() {
  static const Loaded once = load();
  return once;
}
#endif

}  // namespace

const CudaPlugin& cuda_plugin() {
#if !TESSERA_HAVE_CUDA
  throw UnsupportedError(std::string("a CUDA device was requested, but ") + kNotBuilt);
#elif defined(TESSERA_CUDA_LINKED_IN)
  return *tessera_cuda_plugin();
#else
  const Loaded& plugin = loaded();
  if (plugin.plugin == nullptr) throw UnsupportedError("a CUDA device was requested, but " + plugin.error);
  return *plugin.plugin;
#endif
}

Backend& cuda_backend() { return cuda_plugin().backend(); }

}  // namespace detail

bool cuda_backend_built() noexcept { return TESSERA_HAVE_CUDA != 0; }

int cuda_device_count() noexcept {
  try {
    return detail::cuda_plugin().device_count();
  } catch (...) {
    // No plugin (or no CUDA in this build) means no device; cuda_unavailable_reason says why.
    return 0;
  }
}

std::string cuda_unavailable_reason() {
  if (!cuda_backend_built()) return "tessera was built without the CUDA backend";
  try {
    return detail::cuda_plugin().unavailable_reason();
  } catch (const UnsupportedError& error) {
    return error.what();
  }
}

std::string cuda_library_versions() {
  if (!cuda_backend_built()) return "built without CUDA";
  try {
    return detail::cuda_plugin().library_versions();
  } catch (const std::exception& error) {
    return std::string("CUDA libraries unavailable: ") + error.what();
  }
}

}  // namespace tessera
