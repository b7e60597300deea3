// specgen-worker: one process per GPU, owning its CUDA context, so that
// untrusted kernels never run in the host process (docs/worker-protocol.md).
//
// Built with the GPU runtime (CUDA Toolkit headers found), it answers "run"
// and "profile" (docs/gpu-runtime.md); validation itself is the host's
// (it compares the outputs of "run").
#include "gpu/worker/serve.hpp"

#include <cstdlib>

#ifdef SPECGEN_WORKER_WITH_RUNTIME
#include "gpu/worker/runtime/profile_op.hpp"
#include "gpu/worker/runtime/run_op.hpp"
#include "gpu/worker/runtime/worker_state.hpp"
#endif

int main() {
  using namespace specgen::gpu;
  // Kernels load with their module, not at their first launch (CUDA 12.2+
  // loads lazily by default), so no timed sample pays for a load. Set before
  // the driver is initialised; an explicit setting is kept.
  ::setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  const int index = detail::requested_device();
#ifdef SPECGEN_WORKER_WITH_RUNTIME
  // The device is described, not opened: the context is made by the first
  // run, so a machine without a driver still gets a worker that answers.
  nlohmann::json device = {{"index", index}};
  if (auto d = query_device(index)) {
    device["name"] = d->name;
    device["arch"] = d->arch;
    device["multiprocessors"] = d->multiprocessors;
    device["l2_bytes"] = d->l2_bytes;
    device["memory_bytes"] = d->memory_bytes;
    device["peak_dram_gbps"] = d->peak_dram_gbps;
    device["pci_bus_id"] = d->pci_bus_id;
  } else {
    device["name"] = "none";
    device["error"] = d.error().message;
  }
  detail::worker_state state(index);  // the context and the loaded modules, kept between requests
  // Outputs go straight into the bulk region, where the host reads them in place.
  const detail::bulk_region& bulk = detail::worker_bulk();
  state.reply_region = {reinterpret_cast<std::byte*>(bulk.data), bulk.size};
  constexpr const char* known = "echo, run, profile";
#else
  nlohmann::json device = {{"index", index}, {"name", "none (built without the GPU runtime)"}};
  constexpr const char* known = "echo";
#endif
  if (!detail::send_hello(device)) return 0;
  return detail::serve(detail::exiting_request_handler([&](const request& r) -> detail::handled {
    if (r.op == "echo") return {{.ok = true, .result = r.args, .error = {}, .binary = r.binary}};
#ifdef SPECGEN_WORKER_WITH_RUNTIME
    if (r.op == "run" || r.op == "profile") {
      auto out = r.op == "run" ? detail::run_op(state, r) : detail::profile_op(state, r);
      return {std::move(out.reply), out.must_exit};
    }
#endif
    return {{.ok = false,
             .result = {},
             .error = fmt::format("unknown op \"{}\": not implemented in this build; this worker knows {}", r.op, known),
             .binary = {}}};
  }));
}
