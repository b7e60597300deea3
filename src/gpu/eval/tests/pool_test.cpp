// gpu_pool and evaluate_batch against specgen-fake-worker: results posted to
// a real-time event loop, busy accounting, cancellation, without a GPU.
#include "fixture.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using namespace fixture;
using namespace std::chrono_literals;

namespace {

pool_config two_fake_devices() {
  pool_config c;
  c.devices = {0, 1};
  c.session = fake_config();
  return c;
}

eval_job job(job_id id, stage kind, int device, const std::string& kernel,
             std::shared_ptr<const task> t = std::make_shared<const task>(sum_task())) {
  return {.id = id, .kind = kind, .device = device, .cand = std::make_shared<const candidate>(make_candidate(kernel, id)),
          .for_task = std::move(t)};
}

}  // namespace

TEST_CASE("the pool runs compile, validate and profile jobs and posts them to the loop") {
  event_loop<steady_clock> loop;
  auto pool = gpu_pool::create(loop, two_fake_devices());
  REQUIRE(pool);
  gpu_pool& p = **pool;
  CHECK(p.devices() == 2);
  CHECK(p.compile_slots() == 2);
  CHECK(p.device(1).index == 1);
  CHECK(p.device(1).name == "fake H200");

  std::map<job_id, eval_outcome> out;
  const auto loop_thread = std::this_thread::get_id();
  auto record = [&](eval_outcome o) {
    CHECK(std::this_thread::get_id() == loop_thread);
    out[o.id] = std::move(o);
  };
  p.submit(job(1, stage::compile, -1, "good_add"), record);
  p.submit(job(2, stage::validate, 0, "good_add"), record);
  p.submit(job(3, stage::profile, 1, "good_add"), record);
  p.submit(job(4, stage::validate, 1, "wrong_add"), record);  // queued behind job 3
  loop.run();  // returns once every job has reported: the pool holds the loop until then

  REQUIRE(out.size() == 4);
  CHECK(out[1].result.kind == verdict_kind::ok);
  CHECK(out[1].device == -1);
  CHECK(out[1].busy > 0ns);
  CHECK(out[2].result.kind == verdict_kind::ok);
  CHECK(out[2].device == 0);
  CHECK(out[3].result.kind == verdict_kind::ok);
  REQUIRE(out[3].timing);
  CHECK(out[3].timing->speedup == Approx(2));
  CHECK(out[4].result.kind == verdict_kind::wrong_result);
  for (auto& [id, o] : out) CHECK_FALSE(o.cancelled);

  pool_stats st = p.stats();
  REQUIRE(st.busy_seconds.size() == 2);
  CHECK(st.jobs == std::vector<std::uint64_t>{1, 2});
  CHECK(st.busy_seconds[0] == Approx(to_seconds(out[2].busy)));
  CHECK(st.busy_seconds[1] == Approx(to_seconds(out[3].busy + out[4].busy)));
  CHECK(st.compiles == 1);
  CHECK(st.cancelled == 0);
}

TEST_CASE("before_job runs on the device's thread before each validate and profile job, with its working set") {
  event_loop<steady_clock> loop;
  auto config = two_fake_devices();
  std::mutex m;
  std::vector<std::pair<int, std::uint64_t>> calls;
  config.before_job = [&](int device, std::uint64_t bytes) {
    std::lock_guard lock(m);
    calls.emplace_back(device, bytes);
    if (calls.size() == 1) throw std::runtime_error("an advisory hook may fail");
  };
  auto pool = gpu_pool::create(loop, config);
  REQUIRE(pool);
  std::map<job_id, eval_outcome> out;
  auto record = [&](eval_outcome o) { out[o.id] = std::move(o); };
  (*pool)->submit(job(1, stage::compile, -1, "good_add"), record);
  (*pool)->submit(job(2, stage::validate, 1, "good_add"), record);
  loop.run();
  (*pool)->submit(job(3, stage::profile, 1, "good_add"), record);
  loop.run();
  REQUIRE(out.size() == 3);
  CHECK(out[2].result.kind == verdict_kind::ok);  // the throwing hook cost nothing
  REQUIRE(calls.size() == 2);                      // not for the compile
  const auto want = job_working_set_bytes(sum_task(), (*pool)->device(1));
  CHECK(calls[0] == std::pair<int, std::uint64_t>{1, want});
  CHECK(calls[1] == std::pair<int, std::uint64_t>{1, want});
  CHECK(want > (256ull << 20));
}

TEST_CASE("cancel drops a queued job and aborts a running one") {
  event_loop<steady_clock> loop;
  auto pool = gpu_pool::create(loop, two_fake_devices());
  REQUIRE(pool);
  gpu_pool& p = **pool;
  std::map<job_id, eval_outcome> out;
  auto record = [&](eval_outcome o) { out[o.id] = std::move(o); };
  p.submit(job(1, stage::validate, 0, "slow_add"), record);
  p.submit(job(2, stage::validate, 0, "good_add"), record);
  CHECK(p.cancel(2));  // still queued behind job 1
  CHECK_FALSE(p.cancel(99));
  loop.after(std::chrono::milliseconds(1500), [&] { CHECK(p.cancel(1)); });  // compiled and inside a slow run by then
  loop.run();
  REQUIRE(out.size() == 2);
  CHECK(out[2].cancelled);
  CHECK(out[2].busy == 0ns);
  CHECK(out[1].cancelled);
  CHECK(out[1].busy > 0ns);
  CHECK(p.stats().cancelled == 2);
  CHECK(p.stats().jobs[0] == 0);

  // The device is usable afterwards.
  p.submit(job(3, stage::validate, 0, "good_add"), record);
  loop.run();
  CHECK(out[3].result.kind == verdict_kind::ok);
}

TEST_CASE("a cancelled compile reports at once") {
  event_loop<steady_clock> loop;
  auto pool = gpu_pool::create(loop, two_fake_devices());
  REQUIRE(pool);
  std::vector<eval_outcome> out;
  candidate c = make_candidate("fresh_add");
  c.source += "// not compiled before\n";
  (*pool)->submit({.id = 7, .kind = stage::compile, .device = -1, .cand = std::make_shared<const candidate>(c),
                   .for_task = std::make_shared<const task>(sum_task())},
                  [&](eval_outcome o) { out.push_back(std::move(o)); });
  CHECK((*pool)->cancel(7));
  loop.run();
  REQUIRE(out.size() == 1);
  CHECK(out[0].cancelled);
  CHECK(out[0].kind == stage::compile);
}

TEST_CASE("the pool refuses a virtual loop and says no GPU without one") {
  event_loop<virtual_clock> virt;
  CHECK_FALSE(gpu_pool::create(virt, two_fake_devices()));
  event_loop<steady_clock> loop;
  pool_config c = two_fake_devices();
  c.devices.clear();
  c.session.assumed_device.reset();
  if (specgen::gpu::device_count().value_or(0) > 0) {
    WARN("a GPU is present: the no-GPU answer is not tested here");
    return;
  }
  auto p = gpu_pool::create(loop, c);
  REQUIRE_FALSE(p);
  CHECK(p.error().message.starts_with("no GPU: "));
}

TEST_CASE("evaluate_batch runs every candidate through the pipeline, results in input order") {
  std::vector<candidate> cands{make_candidate("good_add", 10), make_candidate("wrong_add", 11),
                               make_candidate("good_add", 12), make_candidate("fast_add", 13)};
  cands[2].source = "this does not compile";
  std::vector<std::size_t> progress;
  auto r = evaluate_batch(two_fake_devices(), sum_task(), cands,
                          [&](std::size_t i, const evaluation&) { progress.push_back(i); });
  REQUIRE(r);
  REQUIRE(r->size() == 4);
  CHECK((*r)[0].id == 10);
  CHECK((*r)[0].result.kind == verdict_kind::ok);
  CHECK((*r)[0].timing);
  CHECK((*r)[1].result.kind == verdict_kind::wrong_result);
  CHECK((*r)[2].result.kind == verdict_kind::compile_error);
  CHECK((*r)[3].result.kind == verdict_kind::suspicious);
  CHECK(progress.size() == 4);
}
