// specgen-worker: one process per GPU, owning its CUDA context, so that
// untrusted kernels never run in the host process (docs/worker-protocol.md).
//
// Built with the GPU runtime (CUDA Toolkit headers found), it answers "run"
// (docs/gpu-runtime.md); validate/profile/load arrive later.
#include "serve.hpp"

#ifdef SPECGEN_WORKER_WITH_RUNTIME
#include "../runtime/run_op.hpp"

#include <memory>
#endif

int main() {
  using namespace specgen::gpu;
  const int index = detail::requested_device();
#ifdef SPECGEN_WORKER_WITH_RUNTIME
  // The device is described, not opened: the context is made by the first
  // run, so a machine without a driver still gets a worker that answers.
  nlohmann::json device = {{"index", index}};
  if (auto d = query_device(index)) {
    device["name"] = d->name;
    device["arch"] = d->arch;
  } else {
    device["name"] = "none";
    device["error"] = d.error().message;
  }
  std::unique_ptr<gpu_context> ctx;
  constexpr const char* known = "echo, run, validate, profile, load";
#else
  nlohmann::json device = {{"index", index}, {"name", "none (built without the GPU runtime)"}};
  constexpr const char* known = "echo, validate, profile, load";
#endif
  if (!detail::send_hello(device)) return 0;
  return detail::serve(detail::exiting_request_handler([&](const request& r) -> detail::handled {
    if (r.op == "echo") return {{.ok = true, .result = r.args, .error = {}, .binary = r.binary}};
#ifdef SPECGEN_WORKER_WITH_RUNTIME
    if (r.op == "run") {
      auto out = detail::run_op(ctx, index, r);
      return {std::move(out.reply), out.must_exit};
    }
#endif
    if (r.op == "validate" || r.op == "profile" || r.op == "load")
      return {{.ok = false, .result = {}, .error = fmt::format("\"{}\" is not implemented in this build", r.op), .binary = {}}};
    return {{.ok = false, .result = {}, .error = fmt::format("unknown op \"{}\"; this worker knows {}", r.op, known), .binary = {}}};
  }));
}
