// The supervisor as a specification, against the real skeleton worker and a
// stand-in that hangs, crashes, exits or writes garbage.
#include "gpu/supervisor/worker_host.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <thread>

#include <signal.h>

using namespace specgen::gpu;
using namespace std::chrono_literals;
using kind = worker_failure::kind;

namespace {

using steady = std::chrono::steady_clock;

/// A fake worker in `mode`; heartbeats slow enough to stay out of the way
/// unless a test is about them.
worker_config fake(std::string mode, specgen::duration heartbeat = 10s) {
  return {.program = SPECGEN_FAKE_WORKER,
          .args = {"--mode=" + mode, "--delay-ms=100"},
          .device = 3,
          .heartbeat_interval = heartbeat,
          .heartbeat_timeout = 200ms,
          .startup_timeout = 2s};
}

request echo(int x) { return {.op = "echo", .args = {{"x", x}}, .binary = "bin"}; }

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

bool process_exists(int pid) { return ::kill(pid, 0) == 0; }

}  // namespace

TEST_CASE("the skeleton worker says hello with its pid and the device it was given") {
  worker_host w({.program = SPECGEN_WORKER, .args = {}, .device = 2});
  REQUIRE(w.start());
  auto info = w.info();
  CHECK(info.pid > 0);
  CHECK(info.hello["pid"] == info.pid);
  CHECK(info.hello["protocol"] == protocol_version);
  CHECK(info.hello["device"]["index"] == 2);
}

TEST_CASE("the skeleton worker echoes and refuses validate with a healthy error response") {
  worker_host w({.program = SPECGEN_WORKER});
  REQUIRE(w.start());
  auto r = w.call(echo(7), 2s);
  REQUIRE(r);
  CHECK(r->ok);
  CHECK(r->result["x"] == 7);
  CHECK(r->binary == "bin");
  auto v = w.call({.op = "validate", .args = {}, .binary = {}}, 2s);
  REQUIRE(v);
  CHECK_FALSE(v->ok);
  CHECK_THAT(v->error, Catch::Contains("not implemented in this build"));
  CHECK(w.stats().respawns == 0);
}

TEST_CASE("large binary parts come back through the bulk region, small ones and overflow through the channel") {
  std::string big(8u << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  const request large{.op = "echo", .args = {{"x", 1}}, .binary = big};

  std::optional<response> first;
  {
    worker_host w({.program = SPECGEN_WORKER});
    REQUIRE(w.start());
    auto small = w.call(echo(2), 2s);
    REQUIRE(small);
    CHECK(small->binary == "bin");
    CHECK(w.stats().bulk_bytes == 0);
    for (int round = 0; round < 2; ++round) {  // the region is reused
      auto r = w.call(large, 5s);
      REQUIRE(r);
      CHECK(r->bulk == big.size());  // read in place, not copied into the frame's binary
      CHECK(r->binary.empty());
      CHECK(r->payload() == big);
      if (round == 0) first = *r;
    }
    CHECK(w.stats().bulk_bytes == 2 * big.size());
  }
  // The response's mapping outlives the worker and its host.
  REQUIRE(first);
  CHECK(first->payload() == big);

  // A region too small for the payload, and none at all: the channel carries it.
  for (std::uint64_t region : {std::uint64_t{1} << 20, std::uint64_t{0}}) {
    worker_host narrow({.program = SPECGEN_WORKER, .bulk_bytes = region});
    REQUIRE(narrow.start());
    auto r = narrow.call(large, 5s);
    REQUIRE(r);
    CHECK(r->bulk == 0);
    CHECK(r->binary == big);
    CHECK(r->payload() == big);
    CHECK(narrow.stats().bulk_bytes == 0);
  }
}

TEST_CASE("a worker that hangs on a request times out near its deadline and is replaced") {
  worker_host w(fake("hang"));
  REQUIRE(w.start());
  int old_pid = w.info().pid;
  auto t0 = steady::now();
  auto r = w.call(echo(1), 300ms);
  double took = seconds_since(t0);
  REQUIRE_FALSE(r);
  CHECK(r.error().what == kind::timeout);
  CHECK_THAT(r.error().message, Catch::Contains("within 0.300 s"));
  CHECK(took >= 0.3);
  CHECK(took < 0.3 + 0.5);  // the deadline plus a heartbeat timeout's worth for kill and respawn
  CHECK(w.alive());
  CHECK(w.info().pid != old_pid);
  CHECK_FALSE(process_exists(old_pid));
  CHECK(w.stats().timeouts == 1);
  CHECK(w.stats().respawns == 1);
}

TEST_CASE("the call after a failure goes to the fresh worker and succeeds") {
  worker_host w({.program = SPECGEN_FAKE_WORKER, .args = {"--mode=slow", "--delay-ms=400"}, .heartbeat_interval = 10s});
  REQUIRE(w.start());
  REQUIRE(w.call(echo(1), 100ms).error().what == kind::timeout);
  auto r = w.call(echo(2), 2s);
  REQUIRE(r);
  CHECK(r->result["x"] == 2);
}

TEST_CASE("a worker that aborts is crashed, names its signal and stderr, and is replaced within 1 s") {
  worker_host w(fake("crash"));
  REQUIRE(w.start());
  auto r = w.call(echo(1), 2s);
  REQUIRE_FALSE(r);
  CHECK(r.error().what == kind::crashed);
  CHECK_THAT(r.error().message, Catch::Contains("SIGABRT"));
  CHECK_THAT(r.error().message, Catch::Contains("fake worker: aborting on request echo"));
  CHECK(w.alive());
  CHECK(w.stats().crashes == 1);
  CHECK(w.last_respawn_seconds() > 0);
  CHECK(w.last_respawn_seconds() < 1.0);
}

TEST_CASE("a worker that exits is crashed with its exit status") {
  worker_host w(fake("exit"));
  REQUIRE(w.start());
  auto r = w.call(echo(1), 2s);
  REQUIRE_FALSE(r);
  CHECK(r.error().what == kind::crashed);
  CHECK_THAT(r.error().message, Catch::Contains("exited with status 3"));
  CHECK(w.alive());
}

TEST_CASE("a worker that writes garbage is a protocol_error and is replaced") {
  worker_host w(fake("garbage"));
  REQUIRE(w.start());
  int old_pid = w.info().pid;
  auto r = w.call(echo(1), 2s);
  REQUIRE_FALSE(r);
  CHECK(r.error().what == kind::protocol_error);
  CHECK_THAT(r.error().message, Catch::Contains("bad frame magic"));
  CHECK(w.info().pid != old_pid);
  CHECK_FALSE(process_exists(old_pid));
  CHECK(w.stats().protocol_errors == 1);
}

TEST_CASE("cancel from another thread ends the pending call as cancelled") {
  worker_host w(fake("hang"));
  REQUIRE(w.start());
  CHECK_FALSE(w.cancel());  // nothing to cancel yet
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    CHECK(w.cancel());
  });
  auto t0 = steady::now();
  auto r = w.call(echo(1), 5s);
  double took = seconds_since(t0);
  canceller.join();
  REQUIRE_FALSE(r);
  CHECK(r.error().what == kind::cancelled);
  CHECK(took < 1.0);
  CHECK(w.alive());
  CHECK(w.stats().cancellations == 1);
}

TEST_CASE("an idle worker that stops answering heartbeats is replaced") {
  worker_host w(fake("hang", 50ms));
  REQUIRE(w.start());
  int old_pid = w.info().pid;
  auto t0 = steady::now();
  while (w.stats().heartbeat_misses == 0 && seconds_since(t0) < 2.0) std::this_thread::sleep_for(10ms);
  CHECK(w.stats().heartbeat_misses >= 1);
  CHECK(seconds_since(t0) < 0.05 + 0.2 + 0.5);  // interval + timeout + respawn slack
  CHECK(w.info().pid != old_pid);
  CHECK_FALSE(process_exists(old_pid));
}

TEST_CASE("a healthy idle worker keeps answering heartbeats and is not replaced") {
  worker_host w(fake("ok", 20ms));
  REQUIRE(w.start());
  int pid = w.info().pid;
  std::this_thread::sleep_for(300ms);
  CHECK(w.info().pid == pid);
  CHECK(w.stats().heartbeat_misses == 0);
  CHECK(w.stats().respawns == 0);
  CHECK(w.call(echo(5), 1s)->result["x"] == 5);
}

TEST_CASE("a missing program is spawn_failed with the path in the message") {
  worker_host w({.program = "/nonexistent/specgen-worker"});
  auto s = w.start();
  REQUIRE_FALSE(s);
  CHECK(s.error().what == kind::spawn_failed);
  CHECK_THAT(s.error().message, Catch::Contains("/nonexistent/specgen-worker"));
  CHECK_FALSE(w.alive());
}

TEST_CASE("a worker that never says hello is spawn_failed after the startup timeout") {
  auto c = fake("silent");
  c.startup_timeout = 200ms;
  worker_host w(c);
  auto t0 = steady::now();
  auto s = w.start();
  REQUIRE_FALSE(s);
  CHECK(s.error().what == kind::spawn_failed);
  CHECK_THAT(s.error().message, Catch::Contains("no hello"));
  CHECK(seconds_since(t0) < 1.0);
}

TEST_CASE("the destructor stops the worker process") {
  int pid = 0;
  {
    worker_host w({.program = SPECGEN_WORKER});
    REQUIRE(w.start());
    pid = w.info().pid;
    CHECK(process_exists(pid));
  }
  CHECK_FALSE(process_exists(pid));
}

TEST_CASE("worker_config round-trips through JSON with durations in nanoseconds") {
  worker_config c = fake("ok");
  nlohmann::json j = c;
  CHECK(j["heartbeat_timeout_ns"] == 200'000'000);
  CHECK(j.get<worker_config>() == c);
  auto partial = nlohmann::json::parse(R"({"program": "w"})").get<worker_config>();
  CHECK(partial.program == "w");
  CHECK(partial.heartbeat_interval == std::chrono::milliseconds(100));
}

TEST_CASE("a worker inherits only what CUDA, the loader and specgen read, never other secrets") {
  const auto env = detail::worker_environment({"OPENAI_API_KEY=sk-secret", "MY_TOKEN=t", "PATH=/usr/bin",
                                               "CUDA_VISIBLE_DEVICES=1", "LD_LIBRARY_PATH=/opt/cuda/lib64",
                                               "SPECGEN_WORKER_DEVICE=7", "SPECGEN_WORKER_INPUT_CACHE_MB=64",
                                               "HOME=/root", "NVIDIA_VISIBLE_DEVICES=all"});
  CHECK(env == std::vector<std::string>{"PATH=/usr/bin", "CUDA_VISIBLE_DEVICES=1", "LD_LIBRARY_PATH=/opt/cuda/lib64",
                                        "SPECGEN_WORKER_INPUT_CACHE_MB=64", "HOME=/root", "NVIDIA_VISIBLE_DEVICES=all"});
}
