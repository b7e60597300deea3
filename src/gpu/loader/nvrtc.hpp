#pragma once
// NVRTC resolved at run time (dlopen), so nothing links libnvrtc and a machine
// without the toolkit gets an error value at the first compile, not a loader failure.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <nvrtc.h>

#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

struct nvrtc_api {
  decltype(&::nvrtcGetErrorString) get_error_string = nullptr;
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetCUBINSize) get_cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) get_cubin = nullptr;
  decltype(&::nvrtcGetProgramLogSize) get_program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) get_program_log = nullptr;
  decltype(&::nvrtcSetFlowCallback) set_flow_callback = nullptr;
  std::string version_string;  ///< "major.minor"
  std::string library;         ///< the file that was loaded, as an absolute path where it can be found
  std::string builtins;        ///< the builtins library loaded beside it (empty: left to the loader)
};

/// Loads the first of `libraries` that dlopen accepts and resolves the API.
/// NVRTC opens its builtins library (libnvrtc-builtins.so.MAJOR.MINOR) by
/// name at its first compile, which fails where the toolkit's library folder
/// is not on the loader's path; so the one beside the loaded libnvrtc is
/// loaded here first, by its full path, and NVRTC then finds it loaded.
expected<nvrtc_api, error> open_nvrtc(const std::vector<std::string>& libraries);

/// The process-wide NVRTC, loaded on the first call (thread-safe); later calls
/// return the same outcome. Honours $SPECGEN_NVRTC_LIBRARY.
const expected<const nvrtc_api*, error>& load_nvrtc();

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
