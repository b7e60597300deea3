#include "nvrtc.hpp"

#include "dynlib.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

std::vector<std::string> candidate_libraries() {
  if (const char* forced = std::getenv("SPECGEN_NVRTC_LIBRARY"); forced && *forced) return {forced};
  std::vector<std::string> names{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
#ifdef SPECGEN_CUDA_LIBRARY_DIR
  // The toolkit found at build time, for machines where it is not on the loader's path.
  names.push_back(std::string(SPECGEN_CUDA_LIBRARY_DIR) + "/libnvrtc.so");
#endif
  return names;
}

template <class Fn>
bool resolve(void* lib, const char* symbol, Fn& out, std::string& missing) {
  out = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (!out) missing += missing.empty() ? symbol : fmt::format(", {}", symbol);
  return out != nullptr;
}

/// The absolute path of the library that defines `symbol`.
std::string path_of(const void* symbol, const std::string& fallback) {
  Dl_info info{};
  if (::dladdr(symbol, &info) == 0 || !info.dli_fname || !*info.dli_fname) return fallback;
  std::error_code ec;
  auto canonical = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string(info.dli_fname) : canonical.string();
}

}  // namespace

expected<nvrtc_api, error> open_nvrtc(const std::vector<std::string>& libraries) {
  const auto [lib, loaded, tried, last_error] = detail::open_first(libraries);
  if (!lib)
    return unexpected(error{fmt::format(
        "NVRTC is not available: could not load {} ({}); install the CUDA Toolkit's NVRTC or set "
        "SPECGEN_NVRTC_LIBRARY to the path of libnvrtc.so",
        tried, last_error)});

  nvrtc_api api;
  std::string missing;
  resolve(lib, "nvrtcGetErrorString", api.get_error_string, missing);
  resolve(lib, "nvrtcVersion", api.version, missing);
  resolve(lib, "nvrtcCreateProgram", api.create_program, missing);
  resolve(lib, "nvrtcDestroyProgram", api.destroy_program, missing);
  resolve(lib, "nvrtcCompileProgram", api.compile_program, missing);
  resolve(lib, "nvrtcGetCUBINSize", api.get_cubin_size, missing);
  resolve(lib, "nvrtcGetCUBIN", api.get_cubin, missing);
  resolve(lib, "nvrtcGetProgramLogSize", api.get_program_log_size, missing);
  resolve(lib, "nvrtcGetProgramLog", api.get_program_log, missing);
  resolve(lib, "nvrtcSetFlowCallback", api.set_flow_callback, missing);
  if (!missing.empty())
    return unexpected(error{fmt::format(
        "NVRTC is not available: {} lacks {} (NVRTC 12.0 or newer is needed; set SPECGEN_NVRTC_LIBRARY "
        "to a newer libnvrtc.so)",
        loaded, missing)});

  int major = 0, minor = 0;
  if (api.version(&major, &minor) != NVRTC_SUCCESS)
    return unexpected(error{fmt::format("NVRTC is not available: nvrtcVersion failed in {}", loaded)});
  api.version_string = fmt::format("{}.{}", major, minor);
  api.library = path_of(reinterpret_cast<const void*>(api.version), loaded);

  // RTLD_GLOBAL: NVRTC's own dlopen by name must find it among the loaded objects.
  const auto builtins = std::filesystem::path(api.library).parent_path() /
                        fmt::format("libnvrtc-builtins.so.{}.{}", major, minor);
  if (std::error_code ec; std::filesystem::is_regular_file(builtins, ec) &&
                          ::dlopen(builtins.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr)
    api.builtins = builtins.string();
  return api;
}

namespace {

// NVRTC 12.9+ keeps a compile cache of its own (under ~/.nv/ComputeCache). A
// compile answered from it skips ptxas, so the log loses the ptxas report
// (registers, spills, shared memory) that feedback needs. Seen on an H200 with
// NVRTC 13.0: the second compile of a source, in a later process, returned an
// empty log. specgen caches cubins itself, so NVRTC's cache is switched off
// with CUDA_CACHE_DISABLE=1, unless the user set the variable.
//
// The variable counts only when it is set before the CUDA driver starts in
// the process: set after cuInit, NVRTC's cache stays on (seen on an H200 with
// NVRTC 13.0), and the host program may start the driver before its first
// compile. So it is set three times over:
// - here, when the program (or the shared library) holding this code is
//   loaded, before `main` and before the static initialisers of ordinary
//   priority (101 is the earliest a program may ask for);
// - in load(), for a program that cleared the environment after starting;
// - in the environment of every sandboxed NVRTC helper (sandbox/helper.cpp),
//   where compiles run: it starts with CUDA_CACHE_DISABLE=1 whatever the
//   caller's environment says, since it inherits nothing of it.
// Compiles stay correct without it: the kernels are read from the cubin as
// well (cubin_kernels.cpp); only the spills come from the report alone.
// The setting also turns off the driver's PTX JIT cache in this process,
// which specgen barely uses: it loads cubins.
void disable_nvrtc_cache() noexcept { ::setenv("CUDA_CACHE_DISABLE", "1", /*overwrite=*/0); }

[[gnu::constructor(101)]] void disable_nvrtc_cache_at_load() noexcept { disable_nvrtc_cache(); }

expected<const nvrtc_api*, error> load() {
  disable_nvrtc_cache();
  return open_nvrtc(candidate_libraries()).transform([](nvrtc_api opened) {
    static const nvrtc_api api = std::move(opened);
    return &api;
  });
}

}  // namespace

const expected<const nvrtc_api*, error>& load_nvrtc() {
  static const expected<const nvrtc_api*, error> loaded = load();
  return loaded;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
