#pragma once
/// A worker rank of an MPI evaluation pool on real GPUs, in one call.
///
/// @code
///   specgen::mpi::environment env(argc, argv);
///   auto tasks = specgen::load_suite("tasks/suite").value();  // the same files on every rank
///   if (env.rank() != 0) return specgen::mpi::serve_gpus(env, tasks) ? 0 : 1;
///   // rank 0: mpi_pool::create(...), the engine, ...
/// @endcode
///
/// Built where both MPI and the CUDA Toolkit are found (target specgen::mpi_gpu).
#include <specgen/gpu/evaluation.hpp>
#include <specgen/mpi/pool.hpp>

SPECGEN_BEGIN_NAMESPACE
namespace mpi {

/// Serves rank 0's jobs on this rank's share of its host's GPUs until rank 0
/// says stop. The GPUs are `config.devices` (empty: every GPU of the host),
/// split among the worker ranks of this host by `share_devices`, so that N
/// ranks on an N-GPU host take one GPU each. A GPU pool that cannot start (no
/// GPU, a worker program missing) is `refuse`d to rank 0 with the reason, and
/// the reason is returned.
expected<void, error> serve_gpus(const environment& env, const std::vector<task>& tasks, gpu::pool_config config = {},
                                 worker_config worker = {});

}  // namespace mpi
SPECGEN_END_NAMESPACE
