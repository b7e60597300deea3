#pragma once
// The kernel's half of the NVRTC helper's sandbox: a Landlock ruleset that
// lets the process read the given directories and nothing else on the file
// system, execute nothing, and (where the kernel's Landlock has them) open no
// TCP connection and signal no process outside it.
#include <specgen/detail/config.hpp>

#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

struct landlock_outcome {
  int abi = 0;         ///< the Landlock ABI the ruleset was built for; 0: not applied
  std::string note{};  ///< why not, when `abi` is 0
};

/// Restricts the calling process (all its threads, irrevocably) to reading
/// below `dirs`. Directories that do not exist are left out.
landlock_outcome restrict_to_reading(const std::vector<std::string>& dirs);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
