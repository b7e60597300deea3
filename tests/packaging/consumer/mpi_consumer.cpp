// Built when the package has the MPI evaluation pool (specgen::mpi, present
// where specgen was built with MPI): proves the static library carries MPI
// into a user's link. Nothing here starts MPI.
#include <specgen/mpi/pool.hpp>

#include <fmt/format.h>

int main() {
  const auto mine = specgen::mpi::share_devices({0, 1, 2, 3}, 2, 1);
  fmt::print("worker 1 of 2 takes GPUs {}, {}\n", mine.at(0), mine.at(1));
  return mine == std::vector<int>{1, 3} ? 0 : 1;
}
