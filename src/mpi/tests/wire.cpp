// The messages between rank 0 and the workers carry jobs and outcomes intact;
// worker ranks sharing a host split its GPUs. No MPI is started.
#include "mpi/testing/standin_evaluator.hpp"
#include "mpi/wire.hpp"

#include <specgen/mpi/pool.hpp>

#include <catch2/catch.hpp>

#include <cmath>

using namespace specgen;

TEST_CASE("a job message carries source, plan, task name, stage and device") {
  const mpi::wire::job_message m{.id = 42, .kind = stage::profile, .device = 3, .task = "softmax",
                                 .source = "extern \"C\" __global__ void k() {}\n\"quoted\" \\ \xc3\xa9",
                                 .plan = "launch k grid=(1,1,1) block=(32,1,1)"};
  const auto back = mpi::wire::decode_job(mpi::wire::encode(m));
  CHECK(back.id == 42);
  CHECK(back.kind == stage::profile);
  CHECK(back.device == 3);
  CHECK(back.task == m.task);
  CHECK(back.source == m.source);
  CHECK(back.plan == m.plan);
}

TEST_CASE("an outcome crosses intact: verdict, mismatch (inf included), timing, busy") {
  auto c = std::make_shared<candidate>();
  c->source = "wrong kernel";
  for (stage s : {stage::compile, stage::validate, stage::profile}) {
    eval_outcome o = mpi::testing::judge({.id = 7, .kind = s, .device = 1, .cand = c, .for_task = {}});
    o.busy = std::chrono::nanoseconds(123456789);
    const eval_outcome back = mpi::wire::decode_outcome(mpi::wire::encode(o));
    CHECK(back.id == o.id);
    CHECK(back.kind == o.kind);
    CHECK(back.device == o.device);
    CHECK(back.result == o.result);
    CHECK(back.compile == o.compile);
    CHECK(back.timing == o.timing);
    CHECK(back.busy == o.busy);
    CHECK(back.cancelled == o.cancelled);
    CHECK(back.unjudged == o.unjudged);
  }
  eval_outcome v = mpi::testing::judge({.id = 8, .kind = stage::validate, .device = 0, .cand = c, .for_task = {}});
  REQUIRE(v.result.mismatch);
  CHECK(std::isinf(mpi::wire::decode_outcome(mpi::wire::encode(v)).result.mismatch->max_rel));
  eval_outcome u;
  u.unjudged = true;
  u.cancelled = true;
  const auto back = mpi::wire::decode_outcome(mpi::wire::encode(u));
  CHECK(back.unjudged);
  CHECK(back.cancelled);
}

TEST_CASE("worker ranks on one host share its GPUs") {
  const std::vector<int> gpus{0, 1, 2, 3};
  // One worker takes them all; two take every other one; four take one each.
  CHECK(mpi::share_devices(gpus, 1, 0) == gpus);
  CHECK(mpi::share_devices(gpus, 2, 0) == std::vector<int>{0, 2});
  CHECK(mpi::share_devices(gpus, 2, 1) == std::vector<int>{1, 3});
  CHECK(mpi::share_devices(gpus, 4, 3) == std::vector<int>{3});
  // Three workers: no GPU is left out, none is given twice.
  CHECK(mpi::share_devices(gpus, 3, 0) == std::vector<int>{0, 3});
  CHECK(mpi::share_devices(gpus, 3, 2) == std::vector<int>{2});
  // More workers than GPUs: they share, round-robin.
  CHECK(mpi::share_devices({5}, 2, 0) == std::vector<int>{5});
  CHECK(mpi::share_devices({5}, 2, 1) == std::vector<int>{5});
  CHECK(mpi::share_devices({0, 1}, 3, 2) == std::vector<int>{0});
  // Nothing to share, or a rank that is not a worker (rank 0: index -1).
  CHECK(mpi::share_devices({}, 2, 0).empty());
  CHECK(mpi::share_devices(gpus, 2, -1).empty());
}
