// specgen-fake-worker: a stand-in worker for the supervisor's tests. It speaks
// the protocol and then misbehaves on its first request as asked:
//   --mode=ok       answer like specgen-worker (echo)
//   --mode=hang     send hello, then never read or answer again (not even pings)
//   --mode=crash    abort() on a request
//   --mode=exit     exit(3) on a request
//   --mode=garbage  write random bytes instead of a response
//   --mode=slow     answer after --delay-ms=N milliseconds
//   --mode=silent   never send hello
#include "serve.hpp"

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <sys/resource.h>

int main(int argc, char** argv) {
  using namespace specgen::gpu;
  std::string mode = "ok";
  int delay_ms = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.starts_with("--mode=")) mode = a.substr(7);
    if (a.starts_with("--delay-ms=")) delay_ms = std::atoi(argv[i] + 11);
  }
  // A core dump of a deliberate abort would only slow the test down.
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);

  auto forever = [] {
    while (true) ::pause();
  };
  if (mode == "silent") forever();
  if (!detail::send_hello({{"index", detail::requested_device()}, {"name", "fake"}})) return 0;
  if (mode == "hang") forever();

  return detail::serve([&](const request& r) -> response {
    if (mode == "crash") {
      std::fprintf(stderr, "fake worker: aborting on request %s\n", r.op.c_str());
      std::abort();
    }
    if (mode == "exit") {
      std::fprintf(stderr, "fake worker: exiting with status 3\n");
      std::exit(3);
    }
    if (mode == "garbage") {
      std::mt19937 rng(42);
      std::string junk(256, '\0');
      for (auto& c : junk) c = static_cast<char>(rng());
      junk[0] = 'X';  // never a valid magic by accident
      detail::write_all(STDOUT_FILENO, junk);
      forever();
    }
    if (mode == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    return {.ok = true, .result = r.args, .error = {}, .binary = r.binary};
  });
}
