// specgen-bench kv-bandwidth | kv-prefix | kv-stress: the GPU KV store measured.
//
//   kv-bandwidth  batched fetch (gather + one copy per chunk) against one copy
//                 per block, side by side, by route (same GPU, GPU to GPU peer to
//                 peer, GPU to GPU through pinned memory, pinned host tier to GPU),
//                 block size and batch size
//   kv-prefix     a 16K-token prefix of the default 32B-class model (4 GiB)
//                 fetched, against recomputing it at the replay model's prefill rate
//   kv-stress     concurrent put, fetch, erase, export and memory pressure, every
//                 fetched block compared with its key's bytes; corrupted blocks counted
//
// Every time is the host clock from the first enqueue to the completion of
// the last copy (what a fork waits), median of --reps after one warm-up.
// Nothing here asserts a number; without a GPU each prints "no GPU: <reason>".
#include "gpu_support.hpp"
#include "support/cli.hpp"

#include "gpu/kv/device.hpp"  // the driver, contexts
#include "gpu/kv/stress.hpp"

#include <specgen/gpu/kv_store.hpp>
#include <specgen/gpu/device_info.hpp>
#include <specgen/policy/kv.hpp>
#include <specgen/replay/replay_model.hpp>

#include "gpu/loader/nvrtc.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace specgen::bench {
namespace {

namespace kd = gpu::kv_detail;
using steady = std::chrono::steady_clock;

/// The number of GPUs, or nothing after printing why none can be used (the
/// store compiles its kernels with NVRTC, so it is needed too).
std::optional<int> store_gpus_or_explain() {
  const auto n = gpus_or_explain();
  if (!n) return n;
  if (const auto& nv = gpu::detail::load_nvrtc(); !nv) {
    fmt::print("no GPU: {}\n", nv.error().what());
    return std::nullopt;
  }
  return n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <class F>
double median_seconds(int reps, F&& once) {
  once();  // warm-up: first-touch of buffers, peer mappings, lazy module loading
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) s.push_back(once());
  return median(std::move(s));
}

double gbps(std::uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }

const gpu::detail::driver_api& api() { return **gpu::detail::load_driver(); }

void require(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(fmt::format("{} failed: {}", what, gpu::detail::describe(api(), r)));
}

/// A GPU's primary context and a stream on it, for the one-copy-per-block baseline. Not copyable: owns both.
class raw_stream {
 public:
  explicit raw_stream(int device) {
    kd::context_scope scope(api());
    require(api().cuDeviceGet(&dev_, device), "cuDeviceGet");
    require(api().cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    require(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    require(api().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  ~raw_stream() {
    kd::context_scope scope(api());
    api().cuCtxSetCurrent(ctx_);
    api().cuStreamDestroy(stream_);
    api().cuDevicePrimaryCtxRelease(dev_);
  }
  raw_stream(const raw_stream&) = delete;
  raw_stream& operator=(const raw_stream&) = delete;
  [[nodiscard]] CUcontext ctx() const noexcept { return ctx_; }
  [[nodiscard]] CUstream stream() const noexcept { return stream_; }

 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
};

/// Pinned host memory. Not copyable: owns the allocation.
class pinned {
 public:
  /// Allocated with `ctx` current (the driver needs a context); portable to every context.
  pinned(CUcontext ctx, std::size_t bytes) : ctx_(ctx) {
    kd::context_scope scope(api());
    require(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    require(api().cuMemHostAlloc(&p_, std::max<std::size_t>(bytes, 16), CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
  }
  ~pinned() {
    kd::context_scope scope(api());
    api().cuCtxSetCurrent(ctx_);
    api().cuMemFreeHost(p_);
  }
  pinned(const pinned&) = delete;
  pinned& operator=(const pinned&) = delete;
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(p_); }

 private:
  CUcontext ctx_ = nullptr;
  void* p_ = nullptr;
};

/// Where blocks live and where they go.
struct route {
  std::string name;
  int holder = 0;       ///< GPU holding the blocks
  int dest = 0;         ///< GPU receiving them
  bool peer = true;     ///< peer_to_peer allowed
  bool host_tier = false;  ///< blocks in the pinned host tier (the GPU tier capped at 0)
};

std::vector<route> routes_for(int gpus, int a, int b) {
  std::vector<route> r{{"same-gpu", a, a, true, false}};
  if (gpus >= 2) {
    r.push_back({"peer", b, a, true, false});
    r.push_back({"via-host", b, a, false, false});
  }
  r.push_back({"host-tier", a, a, true, true});
  return r;
}

std::shared_ptr<gpu::kv_store> store_for(const route& r, std::size_t bb, std::uint64_t bytes, std::uint64_t chunk, bool verify) {
  auto s = gpu::kv_store::create({.block_bytes = bb,
                                  .devices = {r.holder},
                                  .device_capacity_bytes = r.host_tier ? 0 : bytes + (1ull << 30),
                                  .reserve_bytes = 2ull << 30,
                                  .host_capacity_bytes = r.host_tier ? bytes + (256ull << 20) : 0,
                                  .slab_bytes = 256ull << 20,
                                  .chunk_bytes = chunk,
                                  .consumer_device = r.dest,
                                  .peer_to_peer = r.peer,
                                  .verify = verify,
                                  .pressure_hold_seconds = 0});
  if (!s) throw std::runtime_error(s.error().what());
  return *s;
}

/// The baseline a store without batching has: one copy per block, each from its slot.
double per_block_once(const route& r, gpu::kv_store& store, std::span<const std::uint64_t> keys, std::uint64_t dst,
                      const raw_stream& src, const raw_stream& to, const pinned* bounce) {
  const std::size_t bb = store.block_bytes();
  std::vector<std::uint64_t> at;
  for (auto k : keys) at.push_back(store.locate(k)->address);
  kd::context_scope scope(api());
  const auto t0 = steady::now();
  if (r.host_tier) {
    api().cuCtxSetCurrent(to.ctx());
    for (std::size_t i = 0; i < keys.size(); ++i)
      require(api().cuMemcpyHtoDAsync(dst + i * bb, reinterpret_cast<const void*>(at[i]), bb, to.stream()), "cuMemcpyHtoDAsync");
    require(api().cuStreamSynchronize(to.stream()), "cuStreamSynchronize");
  } else if (!r.peer && r.holder != r.dest) {
    api().cuCtxSetCurrent(src.ctx());
    for (std::size_t i = 0; i < keys.size(); ++i)
      require(api().cuMemcpyDtoHAsync(bounce->data() + i * bb, at[i], bb, src.stream()), "cuMemcpyDtoHAsync");
    require(api().cuStreamSynchronize(src.stream()), "cuStreamSynchronize");
    api().cuCtxSetCurrent(to.ctx());
    for (std::size_t i = 0; i < keys.size(); ++i)
      require(api().cuMemcpyHtoDAsync(dst + i * bb, bounce->data() + i * bb, bb, to.stream()), "cuMemcpyHtoDAsync");
    require(api().cuStreamSynchronize(to.stream()), "cuStreamSynchronize");
  } else if (r.holder == r.dest) {
    api().cuCtxSetCurrent(src.ctx());
    for (std::size_t i = 0; i < keys.size(); ++i)
      require(api().cuMemcpyDtoDAsync(dst + i * bb, at[i], bb, src.stream()), "cuMemcpyDtoDAsync");
    require(api().cuStreamSynchronize(src.stream()), "cuStreamSynchronize");
  } else {
    // The store enabled peer access between these primary contexts, so these copies go peer to peer too.
    api().cuCtxSetCurrent(src.ctx());
    for (std::size_t i = 0; i < keys.size(); ++i)
      require(api().cuMemcpyPeerAsync(dst + i * bb, to.ctx(), at[i], src.ctx(), bb, src.stream()), "cuMemcpyPeerAsync");
    require(api().cuStreamSynchronize(src.stream()), "cuStreamSynchronize");
  }
  return std::chrono::duration<double>(steady::now() - t0).count();
}

std::vector<std::size_t> numbers(const programs::options& a, const std::string& name, std::vector<std::size_t> fallback) {
  if (!a.has(name)) return fallback;
  std::vector<std::size_t> out;
  for (const auto& s : programs::split_list(a.get(name))) out.push_back(std::stoull(s));
  return out;
}

// ---- kv-bandwidth ------------------------------------------------------------------------

int bench_bandwidth(const programs::options& a) {
  const auto n = store_gpus_or_explain();
  if (!n) return 0;
  const int ga = a.number<int>("device", 0), gb = a.number<int>("peer-device", *n >= 2 ? 1 : 0);
  const auto block_kib = numbers(a, "block-kib", {64, 256, 1024, 4096});
  const auto batches = numbers(a, "batches", {1, 8, 64, 256, 1024});
  const int reps = a.number<int>("reps", 5);
  const std::uint64_t max_bytes = a.number<std::uint64_t>("max-mib", 4096) << 20;
  const std::uint64_t max_host_bytes = a.number<std::uint64_t>("max-host-mib", 1024) << 20;
  const std::uint64_t chunk = a.number<std::uint64_t>("chunk-mib", 256) << 20;
  fmt::print("specgen-bench kv-bandwidth: {} GPU(s), blocks on GPU {} / {}, into GPU {}; chunk {} MiB; median of {} after a warm-up\n",
             *n, ga, gb, ga, chunk >> 20, reps);
  fmt::print("{:<10} {:>9} {:>6} {:>10} {:>12} {:>14} {:>9}\n", "route", "block KiB", "batch", "MiB", "batched GB/s",
             "per-block GB/s", "ratio");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : routes_for(*n, ga, gb)) {
    const std::uint64_t cap = r.host_tier || !r.peer ? std::min(max_bytes, max_host_bytes) : max_bytes;
    for (auto kib : block_kib) {
      const std::size_t bb = kib << 10;
      const std::size_t most = std::min<std::size_t>(*std::max_element(batches.begin(), batches.end()), cap / bb);
      if (most == 0) continue;
      auto store = store_for(r, bb, most * bb, chunk, a.has("verify"));
      const auto keys = kd::stress_chain(1, static_cast<int>(most));
      if (auto ok = store->put_synthetic(keys); !ok) throw std::runtime_error(ok.error().what());
      if (store->resident(keys) != keys.size()) throw std::runtime_error(fmt::format("{}: the store kept only {} of {} blocks", r.name, store->resident(keys), keys.size()));
      kd::stress_buffer dst(api(), r.dest, most * bb);
      raw_stream src(r.holder), to(r.dest);
      std::optional<pinned> bounce;
      if (!r.peer && r.holder != r.dest) bounce.emplace(src.ctx(), most * bb);
      for (auto batch : batches) {
        if (batch > most) continue;
        const auto part = std::span(keys).first(batch);
        const std::uint64_t bytes = batch * bb;
        gpu::kv_transfer last;
        const double batched = median_seconds(reps, [&] {
          auto t = store->fetch_to(part, r.dest, dst.address());
          if (!t) throw std::runtime_error(fmt::format("{}: {}", r.name, t.error().what()));
          last = *t;
          return to_seconds(t->time);
        });
        const double single = median_seconds(reps, [&] { return per_block_once(r, *store, part, dst.address(), src, to, bounce ? &*bounce : nullptr); });
        const double ratio = single > 0 ? single / batched : 0;
        fmt::print("{:<10} {:>9} {:>6} {:>10.1f} {:>12.1f} {:>14.1f} {:>8.1f}x\n", r.name, kib, batch,
                   static_cast<double>(bytes) / (1 << 20), gbps(bytes, batched), gbps(bytes, single), ratio);
        rows.push_back({{"route", r.name}, {"holder", r.holder}, {"dest", r.dest}, {"block_bytes", bb}, {"batch", batch},
                        {"bytes", bytes}, {"batched_seconds", batched}, {"per_block_seconds", single},
                        {"batched_gbps", gbps(bytes, batched)}, {"per_block_gbps", gbps(bytes, single)},
                        {"batched_over_per_block", ratio}, {"gathers", last.gathers}, {"copies", last.copies}});
      }
    }
  }
  write_json(a, {{"benchmark", "kv-bandwidth"},
                 {"method", "host clock from first enqueue to completion; batched = kv_store::fetch_to (gather kernel into "
                            "staging chunks, one copy per chunk; same GPU: the gather writes the destination); per-block = one "
                            "cuMemcpyPeerAsync (via-host: one DtoH and one HtoD, host-tier: one HtoD) per block from its slot"},
                 {"gpus", *n}, {"chunk_bytes", chunk}, {"reps", reps}, {"rows", rows}});
  return 0;
}

// ---- kv-prefix -----------------------------------------------------------------------------

int bench_prefix(const programs::options& a) {
  const auto n = store_gpus_or_explain();
  if (!n) return 0;
  const std::uint64_t tokens = a.number<std::uint64_t>("tokens", 16384);
  const int reps = a.number<int>("reps", 5);
  const int ga = a.number<int>("device", 0), gb = a.number<int>("peer-device", *n >= 2 ? 1 : 0);
  const kv_model model{};
  const replay::replay_params rp;
  std::vector<token_id> prefix(tokens);
  std::iota(prefix.begin(), prefix.end(), 1);
  const auto keys = block_keys(prefix, model.block_tokens);
  const std::uint64_t bytes = keys.size() * model.bytes_per_block();
  const double recompute = static_cast<double>(keys.size() * model.block_tokens) / rp.prefill_tokens_per_s;
  const detail::tier_params<detail::remote_gpu_tier> modelled{};
  fmt::print("specgen-bench kv-prefix: {} tokens of a 32B-class model ({} layers, {} KV heads, head dim {}, bf16): {} blocks, {:.2f} GiB\n",
             tokens, model.layers, model.kv_heads, model.head_dim, keys.size(), static_cast<double>(bytes) / (1ull << 30));
  fmt::print("modelled recompute: {:.3f} s at {:.0f} prefill tokens/s (replay model); remote_gpu_kv models the fetch at {:.2f} ms\n\n",
             recompute, rp.prefill_tokens_per_s, 1e3 * to_seconds(modelled.fetch_time(bytes)));
  fmt::print("{:<10} {:>11} {:>8} {:>10} {:>18}\n", "route", "fetch (ms)", "GB/s", "copies", "recompute / fetch");
  nlohmann::json rows = nlohmann::json::array();
  std::optional<double> lease_seconds;
  for (const auto& r : routes_for(*n, ga, gb)) {
    if (r.host_tier) continue;  // the prefix's tier is a GPU; kv-bandwidth measures the host tier
    auto store = store_for(r, model.bytes_per_block(), bytes, a.number<std::uint64_t>("chunk-mib", 256) << 20, a.has("verify"));
    if (auto ok = store->put_synthetic(keys); !ok) throw std::runtime_error(ok.error().what());
    kd::stress_buffer dst(api(), r.dest, bytes);
    gpu::kv_transfer last;
    const double s = median_seconds(reps, [&] {
      auto t = store->fetch_to(keys, r.dest, dst.address());
      if (!t) throw std::runtime_error(fmt::format("{}: {}", r.name, t.error().what()));
      last = *t;
      return to_seconds(t->time);
    });
    fmt::print("{:<10} {:>11.2f} {:>8.1f} {:>10} {:>17.1f}x\n", r.name, 1e3 * s, gbps(bytes, s), last.copies, recompute / s);
    rows.push_back({{"route", r.name}, {"holder", r.holder}, {"dest", r.dest}, {"fetch_seconds", s}, {"gbps", gbps(bytes, s)},
                    {"copies", last.copies}, {"gathers", last.gathers}, {"recompute_over_fetch", recompute / s}});
    // Through the engine's policy, as a fork's lease sees it (the store's receive buffer on the consumer GPU).
    if (r.name == (*n >= 2 ? "peer" : "same-gpu")) {
      policy::any_kv kv = gpu::make_gpu_kv(store, model);
      kv.store(0, prefix);
      std::vector<double> leases;
      for (int i = 0; i <= reps; ++i) {
        auto l = kv.lease(prefix);
        if (!l || l->cached_tokens != keys.size() * model.block_tokens) throw std::runtime_error("the lease did not cover the prefix");
        if (i > 0) leases.push_back(to_seconds(l->fetch_time));
      }
      lease_seconds = median(leases);
      fmt::print("{:<10} {:>11.2f} {:>8.1f} {:>10} {:>17.1f}x   (kv.lease through policy::backed_kv, route {})\n", "lease",
                 1e3 * *lease_seconds, gbps(bytes, *lease_seconds), "", recompute / *lease_seconds, r.name);
    }
  }
  write_json(a, {{"benchmark", "kv-prefix"},
                 {"tokens", tokens},
                 {"model", model},
                 {"bytes", bytes},
                 {"recompute_seconds", recompute},
                 {"prefill_tokens_per_s", rp.prefill_tokens_per_s},
                 {"modelled_fetch_seconds", to_seconds(modelled.fetch_time(bytes))},
                 {"lease_seconds", lease_seconds ? nlohmann::json(*lease_seconds) : nlohmann::json(nullptr)},
                 {"reps", reps},
                 {"rows", rows}});
  return 0;
}

// ---- kv-stress -----------------------------------------------------------------------------

int bench_stress(const programs::options& a) {
  const auto n = store_gpus_or_explain();
  if (!n) return 0;
  const std::size_t bb = a.number<std::size_t>("block-kib", 64) << 10;
  std::vector<int> devices{0};
  if (*n >= 2) devices.push_back(1);
  // Small tiers, so that blocks keep moving down and out while others read them.
  auto store = gpu::kv_store::create({.block_bytes = bb,
                                      .devices = devices,
                                      .device_capacity_bytes = 8 * (16 * bb + 512),
                                      .reserve_bytes = 1ull << 30,
                                      .host_capacity_bytes = 96 * bb,
                                      .slab_bytes = 16 * bb,
                                      .chunk_bytes = 16 * bb,
                                      .consumer_device = 0,
                                      .peer_to_peer = true,
                                      .verify = true,
                                      .pressure_hold_seconds = 0.01});
  if (!store) throw std::runtime_error(store.error().what());
  const kd::stress_config c{.threads = a.number<int>("threads", 4),
                            .iterations = a.number<int>("iterations", 2000),
                            .families = 8,
                            .max_chain = 32,
                            .max_room = 64ull << 20,
                            .seed = a.number<std::uint64_t>("seed", 1)};
  fmt::print("specgen-bench kv-stress: {} threads x {} operations on GPU(s) {}, {} KiB blocks, checksums on\n", c.threads,
             c.iterations, fmt::join(devices, ","), bb >> 10);
  const auto r = kd::run_stress(**store, c);
  const auto st = (*store)->stats();
  fmt::print("  {} puts, {} fetches, {} gets, {} erases, {} make_room, {} exports in {:.1f} s\n", r.puts, r.fetches, r.gets,
             r.erases, r.rooms, r.exports, r.seconds);
  fmt::print("  {} blocks fetched and compared; {} fetches found blocks evicted meanwhile; {} demoted, {} dropped, {} slabs released\n",
             r.fetched_blocks, r.missing, st.demoted, st.dropped, st.slabs_freed);
  fmt::print("  corrupted blocks: {} (bytes compared), {} (store checksums){}\n", r.corrupted, st.corrupt,
             r.errors.empty() ? "" : fmt::format("; {} other errors, first: {}", r.errors.size(), r.errors.front()));
  write_json(a, {{"benchmark", "kv-stress"},
                 {"threads", c.threads},
                 {"iterations", c.iterations},
                 {"block_bytes", bb},
                 {"devices", devices},
                 {"seconds", r.seconds},
                 {"puts", r.puts},
                 {"fetches", r.fetches},
                 {"gets", r.gets},
                 {"erases", r.erases},
                 {"make_room", r.rooms},
                 {"exports", r.exports},
                 {"fetched_blocks", r.fetched_blocks},
                 {"missing", r.missing},
                 {"corrupted_blocks", r.corrupted},
                 {"checksum_failures", st.corrupt},
                 {"demoted", st.demoted},
                 {"dropped", st.dropped},
                 {"slabs_freed", st.slabs_freed},
                 {"errors", r.errors}});
  return 0;
}

}  // namespace

/// Runs `specgen-bench kv-...` with its options.
int run_kv_bench(const std::string& cmd, const programs::options& a) {
  if (cmd == "kv-bandwidth") return bench_bandwidth(a);
  if (cmd == "kv-prefix") return bench_prefix(a);
  if (cmd == "kv-stress") return bench_stress(a);
  throw std::invalid_argument(fmt::format("unknown benchmark '{}'", cmd));
}

}  // namespace specgen::bench
