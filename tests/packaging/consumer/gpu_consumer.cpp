// Built when the package has the GPU evaluator (specgen::gpu_eval, present
// where specgen was built with the CUDA Toolkit): proves the compiled static
// libraries carry their dependencies into a user's link. Without a GPU it says
// so, which is the documented behaviour.
#include <specgen/gpu/evaluation.hpp>

#include <fmt/format.h>

int main() {
  const std::string worker = specgen::gpu::find_worker_program();
  if (worker.empty()) {
    fmt::print(stderr, "find_worker_program returned nothing\n");
    return 1;
  }
  auto session = specgen::gpu::device_session::open({});
  if (!session) {
    fmt::print("{}\n", session.error().message);
    return 0;
  }
  fmt::print("{} via {}\n", (*session)->device().name, worker);
  return 0;
}
