// serve_gpus: a worker rank's GPU pool behind `serve`.
#include <specgen/mpi/gpu_worker.hpp>

#include <specgen/gpu/device_info.hpp>

#include <fmt/format.h>

SPECGEN_BEGIN_NAMESPACE
namespace mpi {

expected<void, error> serve_gpus(const environment& env, const std::vector<task>& tasks, gpu::pool_config config,
                                 worker_config worker) {
  event_loop<steady_clock> loop;
  if (config.devices.empty()) {
    const auto n = gpu::device_count();
    if (!n || *n == 0)
      return refuse(fmt::format("no GPU: {}", n ? "the driver reports no devices" : n.error().message));
    for (int d = 0; d < *n; ++d) config.devices.push_back(d);
  }
  config.devices = share_devices(config.devices, env.host_workers(), env.host_worker_index());
  auto pool = gpu::gpu_pool::create(loop, std::move(config));
  if (!pool) return refuse(fmt::format("cannot start the GPU pool: {}", pool.error().what()));
  return serve(loop, local_evaluator::of(**pool), tasks, worker);
}

}  // namespace mpi
SPECGEN_END_NAMESPACE
