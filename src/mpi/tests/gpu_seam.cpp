// Compiled (never run) where the GPU evaluator is built: a worker rank serves
// its GPUs by handing its gpu_pool to serve, as the tests hand the stand-in.
#include <specgen/gpu/evaluation.hpp>
#include <specgen/mpi/pool.hpp>

namespace specgen_mpi_gpu_seam {

specgen::expected<void, specgen::error> serve_gpus(specgen::event_loop<specgen::steady_clock>& loop,
                                                   const std::vector<specgen::task>& tasks) {
  auto gpus = specgen::gpu::gpu_pool::create(loop, {});
  if (!gpus) return specgen::unexpected(gpus.error());
  return specgen::mpi::serve(loop, specgen::mpi::local_evaluator::of(**gpus), tasks);
}

}  // namespace specgen_mpi_gpu_seam
