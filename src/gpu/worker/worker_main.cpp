// specgen-worker: one process per GPU, owning its CUDA context, so that
// untrusted kernels never run in the host process (docs/worker-protocol.md).
//
// This build answers the protocol only; validate/profile/load arrive with the
// GPU runtime.
#include "serve.hpp"

int main() {
  using namespace specgen::gpu;
  nlohmann::json device = {{"index", detail::requested_device()}, {"name", "none (built without the GPU runtime)"}};
  if (!detail::send_hello(device)) return 0;
  return detail::serve([](const request& r) -> response {
    if (r.op == "echo") return {.ok = true, .result = r.args, .error = {}, .binary = r.binary};
    if (r.op == "validate" || r.op == "profile" || r.op == "load")
      return {.ok = false, .result = {}, .error = fmt::format("\"{}\" is not implemented in this build", r.op), .binary = {}};
    return {.ok = false, .result = {}, .error = fmt::format("unknown op \"{}\"; this worker knows echo, validate, profile, load", r.op), .binary = {}};
  });
}
