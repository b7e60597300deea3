#pragma once
// A stress run of a kv_store: threads putting, fetching (into their own GPU
// buffers and into host memory), erasing, exporting and making room at
// random, each fetched block compared byte for byte with the synthetic bytes
// of its key. Shared by gpu_kv_test and `specgen-bench kv-stress`, so the
// test and the benchmark count corruption the same way.
#include "device.hpp"

#include <specgen/gpu/kv_store.hpp>
#include <specgen/policy/kv.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::kv_detail {

struct stress_config {
  int threads = 4;
  int iterations = 400;        ///< per thread
  int families = 8;            ///< prompts whose chains share prefixes
  int max_chain = 32;          ///< blocks
  std::uint64_t max_room = 64ull << 20;  ///< make_room asks for the free memory plus up to this
  std::uint64_t seed = 1;
};

struct stress_result {
  std::uint64_t puts = 0, fetches = 0, gets = 0, erases = 0, rooms = 0, exports = 0;
  std::uint64_t fetched_blocks = 0;     ///< blocks compared after a successful fetch or get
  std::uint64_t corrupted = 0;          ///< of those, blocks whose bytes were not their key's
  std::uint64_t missing = 0;            ///< fetches of blocks evicted meanwhile (expected under churn)
  std::uint64_t checksum_failures = 0;  ///< fetches the store refused for a failed checksum
  std::vector<std::string> errors{};    ///< any other failure (the first 16)
  double seconds = 0;
};

/// A device buffer in a GPU's primary context, for the stress threads. Not copyable: it owns the allocation.
class stress_buffer {
 public:
  stress_buffer(const driver_api& api, int device, std::size_t bytes) : api_(api) {
    context_scope scope(api_);
    if (api_.cuDeviceGet(&dev_, device) != CUDA_SUCCESS || api_.cuDevicePrimaryCtxRetain(&ctx_, dev_) != CUDA_SUCCESS)
      throw std::runtime_error(fmt::format("stress: GPU {} is unavailable", device));
    api_.cuCtxSetCurrent(ctx_);
    if (api_.cuMemAlloc(&ptr_, bytes) != CUDA_SUCCESS) throw std::runtime_error(fmt::format("stress: cannot allocate {} bytes on GPU {}", bytes, device));
  }
  ~stress_buffer() {
    context_scope scope(api_);
    api_.cuCtxSetCurrent(ctx_);
    api_.cuMemFree(ptr_);
    api_.cuDevicePrimaryCtxRelease(dev_);
  }
  stress_buffer(const stress_buffer&) = delete;
  stress_buffer& operator=(const stress_buffer&) = delete;
  [[nodiscard]] CUdeviceptr address() const noexcept { return ptr_; }
  /// Free bytes on the buffer's GPU now.
  [[nodiscard]] std::uint64_t free_memory() const {
    context_scope scope(api_);
    api_.cuCtxSetCurrent(ctx_);
    std::size_t free = 0, total = 0;
    return api_.cuMemGetInfo(&free, &total) == CUDA_SUCCESS ? free : 0;
  }
  [[nodiscard]] bool read(std::span<std::byte> out) const {
    context_scope scope(api_);
    api_.cuCtxSetCurrent(ctx_);
    return api_.cuMemcpyDtoH(out.data(), ptr_, out.size()) == CUDA_SUCCESS;
  }

 private:
  const driver_api& api_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUdeviceptr ptr_ = 0;
};

/// The keys of family `f`'s prefix of `blocks` blocks (16 tokens a block).
inline std::vector<std::uint64_t> stress_chain(int family, int blocks) {
  std::vector<token_id> t(static_cast<std::size_t>(blocks) * 16);
  std::iota(t.begin(), t.end(), static_cast<token_id>(family * 100000));
  return block_keys(t, 16, static_cast<std::uint64_t>(family));
}

/// Blocks of `bytes` (key order) that are not `detail::synthetic_block` of their key.
inline std::uint64_t count_corrupted(std::span<const std::uint64_t> keys, std::span<const std::byte> bytes, std::size_t bb) {
  std::vector<std::byte> want(bb);
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    specgen::detail::synthetic_block(keys[i], {}, want);
    if (!std::equal(want.begin(), want.end(), bytes.begin() + static_cast<std::ptrdiff_t>(i * bb))) ++bad;
  }
  return bad;
}

inline stress_result run_stress(kv_store& store, const stress_config& c) {
  const auto& api = **gpu::detail::load_driver();
  const std::size_t bb = store.block_bytes();
  const auto devices = store.config().devices;
  stress_result total;
  std::mutex m;
  auto note = [&](stress_result& r, std::string what) {
    if (r.errors.size() < 16) r.errors.push_back(std::move(what));
  };
  const auto start = std::chrono::steady_clock::now();
  auto body = [&](int thread) {
    stress_result r;
    std::mt19937_64 rng(c.seed * 7919 + static_cast<std::uint64_t>(thread));
    std::vector<std::unique_ptr<stress_buffer>> buffers;
    for (int d : devices) buffers.push_back(std::make_unique<stress_buffer>(api, d, static_cast<std::size_t>(c.max_chain) * bb));
    std::vector<std::byte> host(static_cast<std::size_t>(c.max_chain) * bb);
    for (int i = 0; i < c.iterations; ++i) {
      const int family = static_cast<int>(rng() % static_cast<std::uint64_t>(c.families));
      const int blocks = 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(c.max_chain));
      const auto keys = stress_chain(family, blocks);
      const std::span<std::byte> out(host.data(), keys.size() * bb);
      const int op = static_cast<int>(rng() % 20);
      // A fetch's outcome: its bytes compared, or why there were none.
      auto tally = [&](const std::optional<error>& failed, const char* what) {
        if (!failed) {
          r.fetched_blocks += keys.size();
          r.corrupted += count_corrupted(keys, out, bb);
        } else if (failed->message.find("checksum") != std::string::npos) {
          ++r.checksum_failures;
        } else if (failed->message.find("not stored") != std::string::npos) {
          ++r.missing;
        } else {
          note(r, std::string(what) + ": " + failed->message);
        }
      };
      if (op < 7) {
        ++r.puts;
        if (auto ok = store.put_synthetic(keys); !ok) note(r, "put: " + ok.error().message);
      } else if (op < 13) {
        const std::size_t which = rng() % devices.size();
        auto t = store.fetch_to(keys, devices[which], buffers[which]->address());
        ++r.fetches;
        if (t && !buffers[which]->read(out)) note(r, "reading a fetched buffer back failed");
        tally(t ? std::optional<error>() : t.error(), "fetch_to");
      } else if (op < 16) {
        ++r.gets;
        auto t = store.get(keys, out);
        tally(t ? std::optional<error>() : t.error(), "get");
      } else if (op < 18) {
        ++r.erases;
        store.erase(std::span(keys).subspan(keys.size() / 2));  // a chain's tail, as an LRU would
      } else if (op < 19) {
        // More than is free: the store must release every slab it can on that GPU.
        ++r.rooms;
        const std::size_t which = rng() % devices.size();
        store.make_room(devices[which], buffers[which]->free_memory() + rng() % (c.max_room + 1));
      } else {
        ++r.exports;
        if (auto e = store.export_blocks(keys, seconds(0.05))) store.release(e->lease);
        else note(r, "export: " + e.error().message);
      }
    }
    std::lock_guard lock(m);
    total.puts += r.puts;
    total.fetches += r.fetches;
    total.gets += r.gets;
    total.erases += r.erases;
    total.rooms += r.rooms;
    total.exports += r.exports;
    total.fetched_blocks += r.fetched_blocks;
    total.corrupted += r.corrupted;
    total.missing += r.missing;
    total.checksum_failures += r.checksum_failures;
    for (auto& e : r.errors)
      if (total.errors.size() < 16) total.errors.push_back(std::move(e));
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < c.threads; ++t)
    threads.emplace_back([&, t] {
      try {
        body(t);
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        total.errors.push_back(fmt::format("thread {}: {}", t, e.what()));
      }
    });
  for (auto& t : threads) t.join();
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return total;
}

}  // namespace gpu::kv_detail
SPECGEN_END_NAMESPACE
