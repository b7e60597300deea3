// The GPU KV store: slabs of device memory on the pool's GPUs and of pinned
// host memory below them (bookkeeping in layout.hpp), batched transfers
// (gather into a staging chunk, one copy per chunk), integrity tags and
// checksums, memory pressure, IPC exports. One lock orders every call, and
// every call ends with the GPUs it used synchronised, so no work of one call
// is still in flight when the next one reuses a slot, a staging buffer or an
// argument arena.
#include "device.hpp"
#include "layout.hpp"
#include "transfer_plan.hpp"

#include <specgen/gpu/kv_store.hpp>
#include <specgen/gpu/device_info.hpp>
#include <specgen/detail/json_fields.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

std::string kv_store_config::invalid() const {
  if (block_bytes == 0 || block_bytes % 16 != 0)
    return fmt::format("block_bytes must be a positive multiple of 16 (the gather moves 16-byte vectors), got {}", block_bytes);
  if (slab_bytes == 0) return "slab_bytes must be > 0";
  if (consumer_device < -1) return fmt::format("consumer_device must be a GPU ordinal or -1 (host), got {}", consumer_device);
  if (!(pressure_hold_seconds >= 0)) return fmt::format("pressure_hold_seconds must be >= 0, got {}", pressure_hold_seconds);
  std::set<int> seen;
  for (int d : devices) {
    if (d < 0) return fmt::format("devices: {} is not a GPU ordinal", d);
    if (!seen.insert(d).second) return fmt::format("devices: GPU {} is listed twice", d);
  }
  return {};
}

void to_json(nlohmann::json& j, const kv_export& e) {
  nlohmann::json slabs = nlohmann::json::array(), blocks = nlohmann::json::array();
  for (const auto& s : e.slabs)
    slabs.push_back({{"pci_bus_id", s.pci_bus_id}, {"ipc_handle", s.ipc_handle}, {"bytes", s.bytes}, {"tags_offset", s.tags_offset}});
  for (const auto& b : e.blocks) blocks.push_back({{"key", b.key}, {"slab", b.slab}, {"slot", b.slot}});
  j = {{"lease", e.lease}, {"block_bytes", e.block_bytes}, {"checksums", e.checksums}, {"slabs", slabs}, {"blocks", blocks}};
}

void from_json(const nlohmann::json& j, kv_export& e) {
  // Every key is required: an export is written by `export_blocks`, and one
  // with a key missing would attach to the wrong memory. An error names the
  // JSON pointer of the value at fault ("/slabs/1/bytes: missing (required)").
  using specgen::detail::nested_in;
  using specgen::detail::required_key;
  using specgen::detail::within;
  e = kv_export{};
  e.lease = required_key<decltype(e.lease)>(j, "lease");
  e.block_bytes = required_key<decltype(e.block_bytes)>(j, "block_bytes");
  e.checksums = required_key<decltype(e.checksums)>(j, "checksums");
  const auto each = [&](std::string_view key, auto&& read) {
    within(j, key, [&](const nlohmann::json& list) {
      if (!list.is_array()) throw specgen::detail::json_read_error({}, specgen::detail::wrong_type_problem("an array", list));
      for (std::size_t i = 0; i < list.size(); ++i) nested_in(i, [&] { read(list[i]); });
    });
  };
  each("slabs", [&](const nlohmann::json& s) {
    e.slabs.push_back({required_key<std::string>(s, "pci_bus_id"), required_key<std::string>(s, "ipc_handle"),
                       required_key<std::uint64_t>(s, "bytes"), required_key<std::uint64_t>(s, "tags_offset")});
  });
  each("blocks", [&](const nlohmann::json& b) {
    e.blocks.push_back({required_key<std::uint64_t>(b, "key"), required_key<std::uint32_t>(b, "slab"),
                        required_key<std::uint32_t>(b, "slot")});
  });
}

namespace detail {

using namespace kv_detail;
using steady = std::chrono::steady_clock;

namespace {

/// Bytes of a device slab's tag per slot: {key, checksum}, read by clients as one 16-byte vector.
constexpr std::uint64_t tag_bytes = 16;

struct device_slab {
  CUdeviceptr base = 0;
  std::uint64_t bytes = 0;
  std::optional<CUipcMemHandle> ipc{};  // obtained at the first export
};

struct host_slab {
  std::byte* base = nullptr;
  std::uint64_t bytes = 0;
};

/// A GPU that holds blocks (one of config.devices).
struct tier_gpu {
  kv_device* dev = nullptr;
  std::map<std::uint32_t, device_slab> slabs;
  std::uint64_t allocated = 0;
  std::uint64_t cap = 0;
  steady::time_point hold_until{};
  std::uint64_t hold_bytes = 0;
};

/// Staging and receive buffers of one GPU: recreated on demand, released first under memory pressure.
struct transient {
  CUdeviceptr staging[2]{};
  std::uint64_t staging_bytes = 0;  // each
  CUdeviceptr recv = 0;
  std::uint64_t recv_bytes = 0;
};

struct lease_info {
  steady::time_point deadline{};
  std::set<std::pair<int, std::uint32_t>> slabs;  // (tier, slab id)
};

enum class put_kind { host, device, synthetic };
struct put_source {
  put_kind kind = put_kind::synthetic;
  const std::byte* host = nullptr;
  kv_device* dev = nullptr;
  CUdeviceptr address = 0;
};

struct destination {
  kv_device* dev = nullptr;  // null: host memory
  CUdeviceptr address = 0;
  std::byte* host = nullptr;
};

std::string key_text(std::uint64_t k) { return fmt::format("{:016x}", k); }

}  // namespace

struct kv_store_state {
  kv_store_state(kv_store_config c, const driver_api& a) : config(std::move(c)), api(a), blocks(static_cast<int>(config.devices.size())) {
    bb = config.block_bytes;
    slots_per_slab = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(config.slab_bytes / bb, 1, 1u << 24));
    tags_offset = (std::uint64_t(slots_per_slab) * bb + 255) & ~std::uint64_t{255};
    device_slab_bytes = tags_offset + std::uint64_t(slots_per_slab) * tag_bytes;
    host_slab_bytes = std::uint64_t(slots_per_slab) * bb;
    chunk_blocks = config.chunk_bytes == 0 ? 0 : std::max<std::uint64_t>(1, config.chunk_bytes / bb);
    host_cap = config.host_capacity_bytes;
  }

  kv_store_config config;
  const driver_api& api;
  std::size_t bb = 0;
  std::uint32_t slots_per_slab = 1;
  std::uint64_t tags_offset = 0, device_slab_bytes = 0, host_slab_bytes = 0, chunk_blocks = 0, host_cap = 0;

  std::map<int, std::unique_ptr<kv_device>> devices;  // by ordinal: every GPU the store has touched
  std::map<int, transient> buffers;                   // by ordinal
  std::vector<tier_gpu> tiers;                        // config.devices, in order
  std::map<std::uint32_t, host_slab> host_slabs;
  std::uint64_t host_allocated = 0;
  std::byte* bounce[2]{};
  std::uint64_t bounce_bytes = 0;
  std::map<std::pair<int, int>, bool> peer;  // (source ordinal, destination ordinal): copy directly
  layout blocks;
  std::uint32_t next_slab = 1;
  std::map<std::uint64_t, lease_info> leases;
  std::uint64_t next_lease = 1;
  std::deque<std::vector<std::uint64_t>> chains;  // recent leases, newest last
  std::vector<std::uint64_t> dropped;
  kv_store_stats stats;
  std::string broken;
  mutable std::mutex mutex;
  // Time callers spent in the store's calls; atomics, because they are added
  // after the lock is released (its wait counts too).
  std::atomic<std::uint64_t> caller_ns{0}, caller_max_ns{0}, make_room_ns{0};

  // ---- devices and memory ----------------------------------------------------------------
  expected<kv_device*, error> device(int ordinal) {
    if (auto it = devices.find(ordinal); it != devices.end()) return it->second.get();
    auto n = gpu::device_count();
    if (!n) return unexpected(error{"no GPU: " + n.error().message});
    if (ordinal < 0 || ordinal >= *n)
      return unexpected(error{fmt::format("there is no GPU {}: the driver sees {} (ordinals from 0)", ordinal, *n)});
    auto d = kv_device::open(api, ordinal);
    if (!d) return unexpected(error{fmt::format("GPU {}: {}", ordinal, d.error().message)});
    kv_device* raw = d->get();
    devices.emplace(ordinal, std::move(*d));
    return raw;
  }

  [[nodiscard]] int tier_of(int ordinal) const {
    for (std::size_t t = 0; t < config.devices.size(); ++t)
      if (config.devices[t] == ordinal) return static_cast<int>(t);
    return host_tier - 1;  // not a tier at all
  }

  [[nodiscard]] std::uint64_t slot_address(const slot_ref& r) const {
    if (r.tier == host_tier) return reinterpret_cast<std::uint64_t>(host_slabs.at(r.slab).base) + std::uint64_t(r.slot) * bb;
    return tiers.at(static_cast<std::size_t>(r.tier)).slabs.at(r.slab).base + std::uint64_t(r.slot) * bb;
  }
  [[nodiscard]] std::uint64_t tag_address(const slot_ref& r) const {
    return tiers.at(static_cast<std::size_t>(r.tier)).slabs.at(r.slab).base + tags_offset + std::uint64_t(r.slot) * tag_bytes;
  }

  [[nodiscard]] std::uint64_t hold(const tier_gpu& t) const { return steady::now() < t.hold_until ? t.hold_bytes : 0; }

  std::optional<std::pair<std::uint32_t, std::uint32_t>> grow_host() {
    if (host_allocated + host_slab_bytes > host_cap) return std::nullopt;
    void* p = nullptr;
    // PORTABLE: every context may use it. DEVICEMAP: kernels read and write
    // it directly (a demotion is one kernel writing over PCIe, no bounce copy).
    if (api.cuMemHostAlloc(&p, host_slab_bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS) return std::nullopt;
    // Under unified addressing mapped pinned memory has the same address on
    // the device as on the host; checked for every context, not assumed.
    for (auto& [ordinal, d] : devices) {
      CUdeviceptr dp = 0;
      if (!d->use() || api.cuMemHostGetDevicePointer(&dp, p, 0) != CUDA_SUCCESS || dp != reinterpret_cast<CUdeviceptr>(p)) {
        api.cuMemFreeHost(p);
        return std::nullopt;
      }
    }
    const std::uint32_t id = next_slab++;
    host_slabs[id] = host_slab{static_cast<std::byte*>(p), host_slab_bytes};
    host_allocated += host_slab_bytes;
    return std::pair{id, slots_per_slab};
  }

  std::optional<std::pair<std::uint32_t, std::uint32_t>> grow_device(int tier) {
    auto& t = tiers[static_cast<std::size_t>(tier)];
    if (t.allocated + device_slab_bytes > t.cap) return std::nullopt;
    auto free = t.dev->free_memory();
    if (!free || *free < device_slab_bytes + config.reserve_bytes + hold(t)) return std::nullopt;
    CUdeviceptr p = 0;
    if (!t.dev->use() || api.cuMemAlloc(&p, device_slab_bytes) != CUDA_SUCCESS) return std::nullopt;  // someone was faster
    // Tags start zero: no slot of a new slab claims a key.
    if (api.cuMemsetD8Async(p + tags_offset, 0, std::uint64_t(slots_per_slab) * tag_bytes, t.dev->compute) != CUDA_SUCCESS) {
      api.cuMemFree(p);
      return std::nullopt;
    }
    const std::uint32_t id = next_slab++;
    t.slabs[id] = device_slab{p, device_slab_bytes, std::nullopt};
    t.allocated += device_slab_bytes;
    return std::pair{id, slots_per_slab};
  }

  layout::grow_fn grower(bool devices_may_grow) {
    return [this, devices_may_grow](int tier) -> std::optional<std::pair<std::uint32_t, std::uint32_t>> {
      if (tier == host_tier) return grow_host();
      if (!devices_may_grow) return std::nullopt;
      return grow_device(tier);
    };
  }

  /// Bytes of blocks tier `t` could take now without evicting: free slots plus whole slabs it may still allocate.
  std::uint64_t spare(int tier) {
    const auto& t = tiers[static_cast<std::size_t>(tier)];
    std::uint64_t room = std::uint64_t(blocks.free_slots(tier)) * bb;
    if (auto free = t.dev->free_memory()) {
      const std::uint64_t keep = config.reserve_bytes + hold(t);
      const std::uint64_t memory = *free > keep ? *free - keep : 0;
      const std::uint64_t cap_left = t.cap > t.allocated ? t.cap - t.allocated : 0;
      room += std::min(memory, cap_left) / device_slab_bytes * slots_per_slab * bb;
    }
    return room;
  }

  /// The GPU with most spare memory (ties: the one holding more slots, whose
  /// least recently used blocks then make room); the host tier without GPUs.
  int choose_tier() {
    int best = host_tier;
    std::uint64_t best_spare = 0;
    std::size_t best_slots = 0;
    for (int t = 0; t < static_cast<int>(tiers.size()); ++t) {
      const std::uint64_t s = spare(t);
      const std::size_t slots = blocks.slots(t);
      if (best == host_tier || s > best_spare || (s == best_spare && slots > best_slots)) {
        best = t;
        best_spare = s;
        best_slots = slots;
      }
    }
    return best;
  }

  expected<void, error> ensure_staging(kv_device& d, std::uint64_t bytes) {
    auto& tb = buffers[d.ordinal];
    if (tb.staging_bytes >= bytes) return {};
    SPECGEN_KV_TRY(d.use());
    for (auto& s : tb.staging)
      if (s) api.cuMemFree(std::exchange(s, 0));
    tb.staging_bytes = 0;
    for (auto& s : tb.staging)
      SPECGEN_KV_TRY(check(api, api.cuMemAlloc(&s, bytes), fmt::format("allocating {} staging bytes on GPU {}", bytes, d.ordinal)));
    tb.staging_bytes = bytes;
    return {};
  }

  expected<CUdeviceptr, error> ensure_recv(kv_device& d, std::uint64_t bytes) {
    auto& tb = buffers[d.ordinal];
    if (tb.recv_bytes < bytes) {
      SPECGEN_KV_TRY(d.use());
      if (tb.recv) api.cuMemFree(std::exchange(tb.recv, 0));
      tb.recv_bytes = 0;
      SPECGEN_KV_TRY(check(api, api.cuMemAlloc(&tb.recv, bytes), fmt::format("allocating a {}-byte receive buffer on GPU {}", bytes, d.ordinal)));
      tb.recv_bytes = bytes;
    }
    return tb.recv;
  }

  expected<void, error> ensure_bounce(std::uint64_t bytes) {
    if (bounce_bytes >= bytes) return {};
    for (auto& b : bounce)
      if (b) api.cuMemFreeHost(std::exchange(b, nullptr));
    bounce_bytes = 0;
    for (auto& b : bounce) {
      void* p = nullptr;
      SPECGEN_KV_TRY(check(api, api.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE), fmt::format("allocating {} pinned bounce bytes", bytes)));
      b = static_cast<std::byte*>(p);
    }
    bounce_bytes = bytes;
    return {};
  }

  /// Releases a GPU's staging and receive buffers (it is idle). Returns the bytes released.
  std::uint64_t release_transient(kv_device& d) {
    auto it = buffers.find(d.ordinal);
    if (it == buffers.end() || !d.use()) return 0;
    auto& tb = it->second;
    std::uint64_t freed = 0;
    for (auto& s : tb.staging)
      if (s) {
        api.cuMemFree(std::exchange(s, 0));
        freed += tb.staging_bytes;
      }
    tb.staging_bytes = 0;
    if (tb.recv) {
      api.cuMemFree(std::exchange(tb.recv, 0));
      freed += tb.recv_bytes;
    }
    tb.recv_bytes = 0;
    return freed;
  }

  /// Whether copies from `s` to `d` go peer to peer (enabling the access once).
  bool peer_ok(kv_device& s, kv_device& d) {
    if (!config.peer_to_peer) return false;
    const auto key = std::pair{s.ordinal, d.ordinal};
    if (auto it = peer.find(key); it != peer.end()) return it->second;
    int can = 0;
    bool ok = api.cuDeviceCanAccessPeer(&can, s.dev, d.dev) == CUDA_SUCCESS && can;
    if (ok) {
      // The copy is issued on the source's stream, so the source's context
      // needs access to the destination. Without it cuMemcpyPeer still works,
      // silently staged through the host: exactly what must not hide here.
      const CUresult r = s.use() ? api.cuCtxEnablePeerAccess(d.ctx, 0) : CUDA_ERROR_INVALID_CONTEXT;
      ok = r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    }
    peer[key] = ok;
    return ok;
  }

  // ---- failures ------------------------------------------------------------------------
  void note_dropped(const std::vector<std::uint64_t>& keys) {
    dropped.insert(dropped.end(), keys.begin(), keys.end());
    stats.dropped += keys.size();
  }
  /// After a failed call: waits for whatever was queued (its slots must not
  /// be reused under it) and marks the store broken after a sticky error.
  void settle(const error& e, bool sticky) {
    for (auto& [ordinal, d] : devices)
      if (d->use()) {
        if (api.cuStreamSynchronize(d->compute) != CUDA_SUCCESS) sticky = true;
        if (api.cuStreamSynchronize(d->copy) != CUDA_SUCCESS) sticky = true;
      }
    if (sticky && broken.empty()) broken = e.message;
  }
  expected<void, error> usable() const {
    if (!broken.empty()) return unexpected(error{"the KV store stopped after a CUDA error: " + broken + "; create a new one"});
    return {};
  }

  void purge_leases() {
    const auto now = steady::now();
    std::erase_if(leases, [&](const auto& l) { return l.second.deadline <= now; });
  }
  [[nodiscard]] bool exported(int tier, std::uint32_t slab) const {
    for (const auto& [id, l] : leases)
      if (l.slabs.contains({tier, slab})) return true;
    return false;
  }

  expected<void, error> reserve(kv_device& d, std::size_t blocks_in_call) {
    SPECGEN_KV_TRY(d.use());
    return d.reserve_arena(blocks_in_call * kv_device::arena_bytes_per_block + (64u << 10));
  }

  // ---- moving blocks --------------------------------------------------------------------
  /// Writes tags {key, checksum} of device slots after their bytes (on `d.compute`):
  /// the checksum first, the key last, so a reader that sees the key sees a complete block.
  expected<void, error> write_tags(kv_device& d, std::span<const slot_ref> slots, std::span<const std::uint64_t> keys,
                                   CUdeviceptr sums) {
    std::vector<std::uint64_t> key_at, sum_at;
    for (const auto& s : slots) {
      key_at.push_back(tag_address(s));
      sum_at.push_back(tag_address(s) + 8);
    }
    SPECGEN_KV_TRY(d.set_words(d.compute, sum_at, sums));
    return d.upload(d.compute, keys.data(), keys.size_bytes()).and_then([&](CUdeviceptr k) {
      return d.set_words(d.compute, key_at, k);
    });
  }
  /// Zeroes the tag keys of device slots about to be overwritten (on `d.compute`, before the bytes).
  expected<void, error> clear_tags(kv_device& d, std::span<const slot_ref> slots) {
    std::vector<std::uint64_t> key_at;
    for (const auto& s : slots) key_at.push_back(tag_address(s));
    return d.zeroed_words(d.compute, slots.size()).and_then([&](const kv_device::words& zeros) {
      return d.set_words(d.compute, key_at, zeros.device);
    });
  }

  /// Carries out a plan's moves (before anything else of the plan is written):
  /// GPU slots to other slots of the GPU (tags rewritten) or to host slots
  /// (one kernel writing mapped pinned memory); host slots to host slots.
  expected<void, error> run_moves(const std::vector<block_move>& moves) {
    std::map<int, std::vector<const block_move*>> by_source;
    for (const auto& m : moves) by_source[m.from.tier].push_back(&m);
    std::vector<const block_move*> host_to_host;
    for (auto& [tier, ms] : by_source) {
      if (tier == host_tier) {
        host_to_host = ms;
        continue;
      }
      kv_device& d = *tiers[static_cast<std::size_t>(tier)].dev;
      SPECGEN_KV_TRY(d.use());
      std::vector<slot_ref> local;
      std::vector<std::uint64_t> local_keys, local_sums;
      for (const auto* m : ms)
        if (m->to.tier != host_tier) {
          local.push_back(m->to);
          local_keys.push_back(m->key);
          local_sums.push_back(blocks.find(m->key)->checksum);
        }
      SPECGEN_KV_TRY(clear_tags(d, local));
      std::vector<std::uint64_t> src, dst;
      for (const auto* m : ms) {
        src.push_back(slot_address(m->from));
        dst.push_back(slot_address(m->to));
      }
      SPECGEN_KV_TRY(d.copy_blocks(d.compute, src, dst, bb));
      if (!local.empty()) {
        auto sums = d.upload(d.compute, local_sums.data(), local_sums.size() * 8);
        if (!sums) return unexpected(sums.error());
        SPECGEN_KV_TRY(write_tags(d, local, local_keys, *sums));
      }
    }
    if (!host_to_host.empty()) {
      for (auto& [o, d] : devices) SPECGEN_KV_TRY(d->synchronize());  // nothing may still read or write these slots
      for (const auto* m : host_to_host)
        std::memcpy(reinterpret_cast<void*>(slot_address(m->to)), reinterpret_cast<const void*>(slot_address(m->from)), bb);
    }
    return {};
  }

  /// Writes the placed blocks of a plan from `src`; `pos` maps a key to its index in the caller's batch.
  expected<void, error> write_placed(const plan& p, const put_source& src, const std::unordered_map<std::uint64_t, std::size_t>& pos,
                                     std::vector<std::pair<std::uint64_t, kv_device::words>>& device_sums) {
    std::map<int, std::vector<std::pair<std::uint64_t, slot_ref>>> by_tier;
    for (const auto& e : p.placed) by_tier[e.second.tier].push_back(e);
    for (auto& [tier, items] : by_tier) {
      std::vector<std::uint64_t> keys, dst;
      std::vector<slot_ref> slots;
      for (const auto& [k, at] : items) {
        keys.push_back(k);
        slots.push_back(at);
        dst.push_back(slot_address(at));
      }
      if (tier == host_tier) {
        // The GPUs had no room: straight into pinned memory. Checksums follow once everything is synchronised.
        for (std::size_t i = 0; i < items.size(); ++i) {
          auto* out = reinterpret_cast<std::byte*>(dst[i]);
          const std::uint64_t off = std::uint64_t(pos.at(keys[i])) * bb;
          if (src.kind == put_kind::synthetic) specgen::detail::synthetic_block(keys[i], {}, std::span(out, bb));
          else if (src.kind == put_kind::host) std::memcpy(out, src.host + off, bb);
          else {
            SPECGEN_KV_TRY(src.dev->use());
            SPECGEN_KV_TRY(check(api, api.cuMemcpyDtoHAsync(out, src.address + off, bb, src.dev->compute), "copying a block to the host tier"));
          }
        }
        continue;
      }
      kv_device& d = *tiers[static_cast<std::size_t>(tier)].dev;
      SPECGEN_KV_TRY(d.use());
      SPECGEN_KV_TRY(clear_tags(d, slots));
      if (src.kind == put_kind::synthetic) {
        SPECGEN_KV_TRY(d.fill_blocks(d.compute, dst, keys, bb));
      } else if (src.kind == put_kind::device && src.dev == &d) {
        std::vector<std::uint64_t> from;
        for (auto k : keys) from.push_back(src.address + std::uint64_t(pos.at(k)) * bb);
        SPECGEN_KV_TRY(d.copy_blocks(d.compute, from, dst, bb));
      } else {
        // Through one staging chunk on this GPU, reused in stream order: copy in, scatter to the slots.
        const std::size_t per = chunk_blocks ? std::min<std::size_t>(chunk_blocks, items.size()) : items.size();
        SPECGEN_KV_TRY(ensure_staging(d, std::uint64_t(per) * bb));
        const CUdeviceptr staging = buffers[d.ordinal].staging[0];
        for (std::size_t c0 = 0; c0 < items.size(); c0 += per) {
          const std::size_t c1 = std::min(items.size(), c0 + per);
          // Runs of consecutive batch positions move as one copy each.
          for (std::size_t j = c0; j < c1;) {
            std::size_t e = j + 1;
            while (e < c1 && pos.at(keys[e]) == pos.at(keys[e - 1]) + 1) ++e;
            const std::uint64_t from = std::uint64_t(pos.at(keys[j])) * bb, len = std::uint64_t(e - j) * bb;
            const CUdeviceptr to = staging + std::uint64_t(j - c0) * bb;
            if (src.kind == put_kind::host)
              SPECGEN_KV_TRY(check(api, api.cuMemcpyHtoDAsync(to, src.host + from, len, d.compute), "copying blocks to the GPU"));
            else
              SPECGEN_KV_TRY(check(api, api.cuMemcpyPeerAsync(to, d.ctx, src.address + from, src.dev->ctx, len, d.compute),
                                   "copying blocks between GPUs"));
            j = e;
          }
          std::vector<std::uint64_t> from, to;
          for (std::size_t j = c0; j < c1; ++j) {
            from.push_back(staging + std::uint64_t(j - c0) * bb);
            to.push_back(dst[j]);
          }
          SPECGEN_KV_TRY(d.copy_blocks(d.compute, from, to, bb));
        }
      }
      auto sums = d.zeroed_words(d.compute, items.size());
      if (!sums) return unexpected(sums.error());
      if (config.verify) {
        SPECGEN_KV_TRY(d.checksum_blocks(d.compute, dst, bb, sums->device));
        SPECGEN_KV_TRY(d.download(d.compute, *sums));
      }
      SPECGEN_KV_TRY(write_tags(d, slots, keys, sums->device));
      for (std::size_t i = 0; i < keys.size(); ++i) device_sums.emplace_back(keys[i], kv_device::words{sums->device + i * 8, sums->host + i, 1});
    }
    return {};
  }

  expected<void, error> put(std::span<const std::uint64_t> keys, const put_source& src) {
    SPECGEN_KV_TRY(usable());
    if (keys.empty()) return {};
    std::unordered_map<std::uint64_t, std::size_t> pos;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (!pos.emplace(keys[i], i).second) return unexpected(error{fmt::format("kv_store: put names block {} twice", key_text(keys[i]))});
    purge_leases();
    const int tier = choose_tier();
    const plan p = blocks.place(keys, tier, grower(true));
    note_dropped(p.dropped);
    stats.demoted += p.demoted;

    std::set<kv_device*> used;
    for (const auto& m : p.moved) used.insert(tiers[static_cast<std::size_t>(m.from.tier)].dev);
    for (const auto& e : p.placed)
      if (e.second.tier != host_tier) used.insert(tiers[static_cast<std::size_t>(e.second.tier)].dev);
    if (src.dev) used.insert(src.dev);
    std::vector<std::pair<std::uint64_t, kv_device::words>> device_sums;
    bool sticky = false;
    auto done = [&]() -> expected<void, error> {
      for (auto* d : used) SPECGEN_KV_TRY(reserve(*d, p.placed.size() + p.moved.size()));
      SPECGEN_KV_TRY(run_moves(p.moved));
      SPECGEN_KV_TRY(write_placed(p, src, pos, device_sums));
      for (auto* d : used) SPECGEN_KV_TRY(d->synchronize());
      return {};
    }();
    if (!done) {
      // The plan's blocks may hold partial bytes: they leave the store (the caller recomputes them).
      settle(done.error(), sticky);
      std::vector<std::uint64_t> lost;
      for (const auto& e : p.placed)
        if (blocks.remove(e.first)) lost.push_back(e.first);
      for (const auto& m : p.moved)
        if (blocks.remove(m.key)) lost.push_back(m.key);
      note_dropped(lost);
      return unexpected(error{"kv_store: put failed: " + done.error().message});
    }
    for (const auto& [k, w] : device_sums) blocks.set_checksum(k, config.verify ? *w.host : 0);
    for (const auto& [k, at] : p.placed)
      if (at.tier == host_tier)
        blocks.set_checksum(k, config.verify ? kv_block_checksum({reinterpret_cast<const std::byte*>(slot_address(at)), bb}) : 0);
    stats.put_blocks += p.placed.size();
    return {};
  }

  /// Empties one slab (moves, then frees its memory). `tier` may be host_tier.
  expected<void, error> release_slab(int tier, std::uint32_t id) {
    const plan p = blocks.evacuate(tier, id, grower(false));
    note_dropped(p.dropped);
    stats.demoted += p.demoted;
    stats.compacted += p.compacted;
    std::set<kv_device*> used;
    if (tier != host_tier) used.insert(tiers[static_cast<std::size_t>(tier)].dev);
    auto moved = [&]() -> expected<void, error> {
      for (auto* d : used) SPECGEN_KV_TRY(reserve(*d, p.moved.size()));
      SPECGEN_KV_TRY(run_moves(p.moved));
      for (auto* d : used) SPECGEN_KV_TRY(d->synchronize());
      return {};
    }();
    if (!moved) {
      settle(moved.error(), false);
      std::vector<std::uint64_t> lost;
      for (const auto& m : p.moved)
        if (blocks.remove(m.key)) lost.push_back(m.key);
      note_dropped(lost);
    }
    // Empty now either way (the blocks moved, or left the store).
    if (tier == host_tier) {
      auto it = host_slabs.find(id);
      api.cuMemFreeHost(it->second.base);
      host_allocated -= it->second.bytes;
      host_slabs.erase(it);
    } else {
      auto& t = tiers[static_cast<std::size_t>(tier)];
      auto it = t.slabs.find(id);
      SPECGEN_KV_TRY(t.dev->use());
      api.cuMemFree(it->second.base);
      t.allocated -= it->second.bytes;
      t.slabs.erase(it);
      ++stats.slabs_freed;
    }
    blocks.remove_slab(tier, id);
    if (!moved) return unexpected(moved.error());
    return {};
  }

  /// Releases slabs of `tier` (not exported) while `more` says so.
  void release_while(int tier, const std::function<bool()>& more) {
    while (more()) {
      const auto id = blocks.emptiest(tier, [&](std::uint32_t s) { return tier == host_tier || !exported(tier, s); });
      if (!id || !release_slab(tier, *id)) return;
    }
  }

  // ---- transfers -------------------------------------------------------------------------
  /// The devices a transfer uses, and each source GPU's route (transfer_plan.hpp).
  struct transfer_setup {
    std::set<kv_device*> used;
    std::map<int, transfer_route> routes;
  };

  expected<void, error> wait_event(kv_device& d, CUstream s, CUevent e) {
    return check(api, api.cuStreamWaitEvent(s, e, 0), fmt::format("cuStreamWaitEvent on GPU {}", d.ordinal));
  }
  expected<void, error> record_event(kv_device& d, CUevent e, CUstream s) {
    return check(api, api.cuEventRecord(e, s), fmt::format("cuEventRecord on GPU {}", d.ordinal));
  }

  expected<kv_transfer, error> transfer(std::span<const std::uint64_t> keys, const destination& dst) {
    SPECGEN_KV_TRY(usable());
    const std::size_t n = keys.size();
    kv_transfer t;
    t.bytes = std::uint64_t(n) * bb;
    if (n == 0) return t;
    const transfer_sources src = group_by_tier(blocks, keys);
    if (src.missing) return unexpected(error{fmt::format("kv_store: block {} is not stored", key_text(*src.missing))});
    blocks.touch(keys);
    auto setup = prepare_transfer(src.by_tier, dst, n);
    if (!setup) return unexpected(setup.error());

    const auto start = steady::now();
    auto issued = issue_transfer(src.by_tier, *setup, dst, t);
    if (!issued) {
      settle(issued.error(), false);
      return unexpected(error{"kv_store: transfer failed: " + issued.error().message});
    }
    t.time = std::chrono::duration_cast<duration>(steady::now() - start);
    if (config.verify) SPECGEN_KV_TRY(verify(keys, dst));
    ++stats.fetches;
    stats.fetched_bytes += t.bytes;
    return t;
  }

  /// Everything that may allocate or enable access, before the clock starts:
  /// staging buffers on each source GPU, the bounce buffers, room for the
  /// kernels' arguments on every device used.
  expected<transfer_setup, error> prepare_transfer(const std::map<int, std::vector<transfer_item>>& by_tier,
                                                   const destination& dst, std::size_t n) {
    transfer_setup setup;
    if (dst.dev) setup.used.insert(dst.dev);
    std::uint64_t bounce_needed = 0;
    for (const auto& [tier, items] : by_tier) {
      if (tier == host_tier) continue;
      kv_device& s = *tiers[static_cast<std::size_t>(tier)].dev;
      setup.used.insert(&s);
      if (&s == dst.dev) continue;
      const std::uint64_t per = chunk_size(chunk_blocks, items.size());
      SPECGEN_KV_TRY(ensure_staging(s, per * bb));
      const transfer_route r = choose_route(!dst.dev, dst.dev && peer_ok(s, *dst.dev));
      setup.routes[tier] = r;
      if (r == transfer_route::via_host) bounce_needed = std::max(bounce_needed, per * bb);
    }
    if (bounce_needed) SPECGEN_KV_TRY(ensure_bounce(bounce_needed));
    for (auto* d : setup.used) SPECGEN_KV_TRY(reserve(*d, n));
    return setup;
  }

  /// The copies, source by source, then the host-to-host part while the GPUs
  /// work; returns once every device used is done.
  expected<void, error> issue_transfer(const std::map<int, std::vector<transfer_item>>& by_tier,
                                       const transfer_setup& setup, const destination& dst, kv_transfer& t) {
    std::size_t g = 0;  // chunks through the bounce buffers, over all sources
    for (const auto& [tier, items] : by_tier) {
      if (tier == host_tier) {
        if (!dst.dev) continue;  // host to host: memcpy below, while the GPUs work
        SPECGEN_KV_TRY(dst.dev->use());
        SPECGEN_KV_TRY(gather_into(*dst.dev, items, dst, t));  // the GPU reads the pinned slots itself
        continue;
      }
      kv_device& s = *tiers[static_cast<std::size_t>(tier)].dev;
      SPECGEN_KV_TRY(s.use());
      if (&s == dst.dev) {
        // Same GPU: the destination is the contiguous buffer; one gather, no copy.
        SPECGEN_KV_TRY(gather_into(s, items, dst, t));
        continue;
      }
      SPECGEN_KV_TRY(send_chunks(s, items, setup.routes.at(tier), dst, g, t));
    }
    if (!dst.dev)
      if (auto h = by_tier.find(host_tier); h != by_tier.end())
        for (const auto& it : h->second)
          std::memcpy(dst.host + std::uint64_t(it.index) * bb, reinterpret_cast<const void*>(slot_address(it.at)), bb);
    for (auto* d : setup.used) SPECGEN_KV_TRY(d->synchronize());
    return {};
  }

  /// Blocks `d` can read where they are (its own slots, or pinned host slots)
  /// gathered straight into the destination buffer on `d`: one kernel.
  expected<void, error> gather_into(kv_device& d, const std::vector<transfer_item>& items, const destination& dst,
                                    kv_transfer& t) {
    std::vector<std::uint64_t> from, to;
    for (const auto& it : items) {
      from.push_back(slot_address(it.at));
      to.push_back(dst.address + std::uint64_t(it.index) * bb);
    }
    SPECGEN_KV_TRY(d.copy_blocks(d.compute, from, to, bb));
    ++t.gathers;
    return {};
  }

  /// One source GPU's blocks, chunk by chunk: gathered into staging buffer
  /// k % 2 on its compute stream, copied out on its copy stream by route `r`
  /// (through bounce buffer g % 2 when via the host), the two buffers
  /// alternating so that gathering chunk k + 1 overlaps copying chunk k.
  expected<void, error> send_chunks(kv_device& s, const std::vector<transfer_item>& items, transfer_route r,
                                    const destination& dst, std::size_t& g, kv_transfer& t) {
    const auto& tb = buffers.at(s.ordinal);
    const std::size_t per = chunk_size(chunk_blocks, items.size());
    for (std::size_t c0 = 0, k = 0; c0 < items.size(); c0 += per, ++k) {
      const std::size_t c1 = std::min(items.size(), c0 + per);
      const int b = static_cast<int>(k % 2);
      const CUdeviceptr staging = tb.staging[b];
      // Gather chunk k into staging buffer b once its previous copy-out is done.
      SPECGEN_KV_TRY(s.use());
      SPECGEN_KV_TRY(wait_event(s, s.compute, s.released[b]));
      std::vector<std::uint64_t> from, to;
      for (std::size_t j = c0; j < c1; ++j) {
        from.push_back(slot_address(items[j].at));
        to.push_back(staging + std::uint64_t(j - c0) * bb);
      }
      SPECGEN_KV_TRY(s.copy_blocks(s.compute, from, to, bb));
      ++t.gathers;
      SPECGEN_KV_TRY(record_event(s, s.gathered[b], s.compute));
      SPECGEN_KV_TRY(wait_event(s, s.copy, s.gathered[b]));
      const std::vector<copy_run> runs = chunk_runs(std::span(items).subspan(c0, c1 - c0), bb);
      if (r == transfer_route::via_host) {
        kv_device& d = *dst.dev;
        const int c = static_cast<int>(g++ % 2);
        SPECGEN_KV_TRY(wait_event(s, s.copy, d.uploaded[c]));  // bounce c's previous upload is done
        SPECGEN_KV_TRY(check(api, api.cuMemcpyDtoHAsync(bounce[c], staging, std::uint64_t(c1 - c0) * bb, s.copy), "copying a chunk to pinned memory"));
        ++t.copies;
        SPECGEN_KV_TRY(record_event(s, s.released[b], s.copy));
        SPECGEN_KV_TRY(d.use());
        SPECGEN_KV_TRY(wait_event(d, d.copy, s.released[b]));
        for (const auto& rn : runs) {
          SPECGEN_KV_TRY(check(api, api.cuMemcpyHtoDAsync(dst.address + rn.dst_off, bounce[c] + rn.src_off, rn.len, d.copy),
                               "copying a chunk from pinned memory"));
          ++t.copies;
          ++stats.host_copies;
        }
        SPECGEN_KV_TRY(record_event(d, d.uploaded[c], d.copy));
        continue;
      }
      for (const auto& rn : runs) {
        if (r == transfer_route::peer) {
          SPECGEN_KV_TRY(check(api, api.cuMemcpyPeerAsync(dst.address + rn.dst_off, dst.dev->ctx, staging + rn.src_off, s.ctx, rn.len, s.copy),
                               fmt::format("cuMemcpyPeerAsync GPU {} -> GPU {}", s.ordinal, dst.dev->ordinal)));
          ++stats.peer_copies;
        } else {
          SPECGEN_KV_TRY(check(api, api.cuMemcpyDtoHAsync(dst.host + rn.dst_off, staging + rn.src_off, rn.len, s.copy), "copying blocks to the host"));
        }
        ++t.copies;
      }
      SPECGEN_KV_TRY(record_event(s, s.released[b], s.copy));
    }
    return {};
  }

  /// Checks the blocks where they arrived against the checksums taken at put.
  expected<void, error> verify(std::span<const std::uint64_t> keys, const destination& dst) {
    const std::size_t n = keys.size();
    std::vector<std::uint64_t> got(n);
    if (dst.dev) {
      kv_device& d = *dst.dev;
      SPECGEN_KV_TRY(d.use());
      auto sums = d.zeroed_words(d.compute, n);
      if (!sums) return unexpected(sums.error());
      std::vector<std::uint64_t> at(n);
      for (std::size_t i = 0; i < n; ++i) at[i] = dst.address + std::uint64_t(i) * bb;
      SPECGEN_KV_TRY(d.checksum_blocks(d.compute, at, bb, sums->device));
      SPECGEN_KV_TRY(d.download(d.compute, *sums));
      SPECGEN_KV_TRY(d.synchronize());
      std::copy(sums->host, sums->host + n, got.begin());
    } else {
      for (std::size_t i = 0; i < n; ++i) got[i] = kv_block_checksum({dst.host + std::uint64_t(i) * bb, bb});
    }
    std::vector<std::uint64_t> bad;
    for (std::size_t i = 0; i < n; ++i)
      if (got[i] != blocks.find(keys[i])->checksum) bad.push_back(keys[i]);
    if (bad.empty()) return {};
    for (auto k : bad) blocks.remove(k);
    note_dropped(bad);
    stats.corrupt += bad.size();
    return unexpected(error{fmt::format("kv_store: {} of {} blocks failed their checksum after the transfer (first {}): the "
                                        "stored KV bytes were corrupted and are dropped; the fork must recompute them",
                                        bad.size(), n, key_text(bad.front()))});
  }

  void remember_chain(std::span<const std::uint64_t> keys) {
    if (keys.empty()) return;
    chains.emplace_back(keys.begin(), keys.end());
    if (chains.size() > 256) chains.pop_front();
  }

  // ---- teardown --------------------------------------------------------------------------
  ~kv_store_state() {
    context_scope scope(api);
    for (auto& [o, d] : devices) (void)d->synchronize();
    for (auto& t : tiers)
      if (t.dev->use())
        for (auto& [id, s] : t.slabs) api.cuMemFree(s.base);
    for (auto& [id, s] : host_slabs) api.cuMemFreeHost(s.base);
    for (auto* b : bounce)
      if (b) api.cuMemFreeHost(b);
    for (auto& [o, d] : devices) release_transient(*d);
    devices.clear();  // releases the contexts last
  }
};

}  // namespace detail

// ---- kv_store ------------------------------------------------------------------------------

using detail::kv_store_state;
using kv_detail::context_scope;
using kv_detail::host_tier;

namespace {
/// Adds the wall time from its construction (before the store's lock is
/// taken) to its end to `total` and keeps the largest in `most`. Not
/// copyable: one measurement per call.
class call_timer {
 public:
  call_timer(std::atomic<std::uint64_t>& total, std::atomic<std::uint64_t>* most = nullptr)
      : total_(total), most_(most), start_(std::chrono::steady_clock::now()) {}
  ~call_timer() {
    const auto ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
    total_ += ns;
    if (!most_) return;
    for (auto seen = most_->load(); ns > seen && !most_->compare_exchange_weak(seen, ns);) {
    }
  }
  call_timer(const call_timer&) = delete;
  call_timer& operator=(const call_timer&) = delete;

 private:
  std::atomic<std::uint64_t>& total_;
  std::atomic<std::uint64_t>* most_;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace

expected<std::shared_ptr<kv_store>, error> kv_store::create(kv_store_config config) {
  if (auto why = config.invalid(); !why.empty()) return unexpected(error{"kv_store: " + why});
  const auto& api = gpu::detail::load_driver();
  if (!api) return unexpected(error{"no GPU: " + api.error().message});
  auto count = device_count();
  if (!count) return unexpected(error{"no GPU: " + count.error().message});
  if (*count == 0) return unexpected(error{"no GPU: the driver sees no devices"});
  if (config.devices.empty())
    for (int d = 0; d < *count; ++d) config.devices.push_back(d);
  auto s = std::make_unique<kv_store_state>(config, **api);
  context_scope scope(**api);
  for (int ordinal : s->config.devices) {
    auto d = s->device(ordinal);
    if (!d) return unexpected(d.error());
    s->tiers.push_back({.dev = *d, .slabs = {}, .allocated = 0, .cap = s->config.device_capacity_bytes, .hold_until = {}, .hold_bytes = 0});
  }
  if (s->config.consumer_device >= 0)
    if (auto d = s->device(s->config.consumer_device); !d) return unexpected(d.error());
  return std::shared_ptr<kv_store>(new kv_store(std::move(s)));
}

kv_store::kv_store(std::unique_ptr<kv_store_state> s) : state_(std::move(s)) {}
kv_store::~kv_store() = default;

std::size_t kv_store::block_bytes() const noexcept { return state_->bb; }

std::uint64_t kv_store::capacity_bytes() const noexcept {
  std::lock_guard lock(state_->mutex);
  std::uint64_t total = state_->host_cap;
  for (const auto& t : state_->tiers) total += t.cap;
  return total;
}

expected<void, error> kv_store::put(std::span<const std::uint64_t> keys, std::span<const std::byte> bytes) {
  call_timer timed(state_->caller_ns, &state_->caller_max_ns);
  if (bytes.size() != keys.size() * state_->bb)
    return unexpected(error{fmt::format("kv_store: put of {} blocks needs {} bytes, got {}", keys.size(), keys.size() * state_->bb, bytes.size())});
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  return state_->put(keys, {.kind = detail::put_kind::host, .host = bytes.data(), .dev = nullptr, .address = 0});
}

expected<void, error> kv_store::put_synthetic(std::span<const std::uint64_t> keys) {
  call_timer timed(state_->caller_ns, &state_->caller_max_ns);
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  return state_->put(keys, {.kind = detail::put_kind::synthetic, .host = nullptr, .dev = nullptr, .address = 0});
}

expected<void, error> kv_store::put_from_device(std::span<const std::uint64_t> keys, int device, std::uint64_t address) {
  call_timer timed(state_->caller_ns, &state_->caller_max_ns);
  if (address % 16 != 0) return unexpected(error{"kv_store: put_from_device needs a 16-byte aligned address"});
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  return state_->device(device).and_then([&](auto* d) {
    return state_->put(keys, {.kind = detail::put_kind::device, .host = nullptr, .dev = d, .address = address});
  });
}

expected<duration, error> kv_store::get(std::span<const std::uint64_t> keys, std::span<std::byte> out) {
  call_timer timed(state_->caller_ns, &state_->caller_max_ns);
  if (out.size() != keys.size() * state_->bb)
    return unexpected(error{fmt::format("kv_store: get of {} blocks needs {} bytes, got {}", keys.size(), keys.size() * state_->bb, out.size())});
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  return state_->transfer(keys, {.dev = nullptr, .address = 0, .host = out.data()}).transform([](const kv_transfer& t) {
    return t.time;
  });
}

expected<duration, error> kv_store::fetch(std::span<const std::uint64_t> keys, std::vector<std::byte>& staging) {
  call_timer timed(state_->caller_ns, &state_->caller_max_ns);
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  auto& s = *state_;
  expected<kv_transfer, error> t = unexpected(error{"kv_store: fetch did not run"});
  if (s.config.consumer_device < 0) {
    staging.resize(keys.size() * s.bb);
    t = s.transfer(keys, {.dev = nullptr, .address = 0, .host = staging.data()});
  } else {
    staging.clear();
    auto d = s.device(s.config.consumer_device);
    if (!d) return unexpected(d.error());
    auto recv = s.ensure_recv(**d, std::uint64_t(keys.size()) * s.bb);
    if (!recv) return unexpected(recv.error());
    t = s.transfer(keys, {.dev = *d, .address = *recv, .host = nullptr});
  }
  if (!t) return unexpected(t.error());
  s.remember_chain(keys);
  return t->time;
}

expected<kv_transfer, error> kv_store::fetch_to(std::span<const std::uint64_t> keys, int device, std::uint64_t address) {
  call_timer timed(state_->caller_ns, &state_->caller_max_ns);
  if (address % 16 != 0) return unexpected(error{"kv_store: fetch_to needs a 16-byte aligned address"});
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  auto d = state_->device(device);
  if (!d) return unexpected(d.error());
  auto t = state_->transfer(keys, {.dev = *d, .address = address, .host = nullptr});
  if (t) state_->remember_chain(keys);
  return t;
}

void kv_store::erase(std::span<const std::uint64_t> keys) {
  call_timer timed(state_->caller_ns, &state_->caller_max_ns);
  std::lock_guard lock(state_->mutex);
  for (auto k : keys) state_->blocks.remove(k);
}

std::vector<std::uint64_t> kv_store::take_dropped() {
  std::lock_guard lock(state_->mutex);
  return std::exchange(state_->dropped, {});
}

std::uint64_t kv_store::shrink(std::uint64_t bytes) {
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  auto& s = *state_;
  s.purge_leases();
  std::uint64_t total = s.host_cap;
  for (const auto& t : s.tiers) total += t.cap;
  if (bytes >= total) return total;
  // The GPUs give first (their memory is what the evaluation needs), evenly; then the host tier.
  std::uint64_t excess = total - bytes;
  while (excess > 0) {
    std::size_t giving = 0;
    for (const auto& t : s.tiers) giving += t.cap > 0 ? 1 : 0;
    if (giving == 0) break;
    const std::uint64_t each = std::max<std::uint64_t>(1, excess / giving);
    for (auto& t : s.tiers) {
      const std::uint64_t cut = std::min({each, t.cap, excess});
      t.cap -= cut;
      excess -= cut;
    }
  }
  s.host_cap -= std::min(s.host_cap, excess);
  for (int t = 0; t < static_cast<int>(s.tiers.size()); ++t) {
    auto& tier = s.tiers[static_cast<std::size_t>(t)];
    s.release_while(t, [&] { return tier.allocated > tier.cap; });
  }
  s.release_while(host_tier, [&] { return s.host_allocated > s.host_cap; });
  total = s.host_cap;
  for (const auto& t : s.tiers) total += t.cap;
  return total;
}

std::uint64_t kv_store::make_room(int device, std::uint64_t bytes) {
  call_timer timed(state_->make_room_ns);
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  auto& s = *state_;
  auto it = s.devices.find(device);
  if (it == s.devices.end()) return 0;  // no context of ours there: nothing of ours to release
  kv_detail::kv_device& d = *it->second;
  s.purge_leases();
  const int tier = s.tier_of(device);
  if (tier >= 0) {
    auto& t = s.tiers[static_cast<std::size_t>(tier)];
    using clock = std::chrono::steady_clock;
    t.hold_until = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s.config.pressure_hold_seconds));
    t.hold_bytes = bytes;
  }
  const std::uint64_t need = bytes + s.config.reserve_bytes;
  auto free = [&]() -> std::uint64_t {
    auto f = d.free_memory();
    return f ? *f : 0;
  };
  std::uint64_t now_free = free();
  if (now_free >= need) return now_free;
  // Buffers that hold no data first, then slabs, emptiest first.
  s.release_transient(d);
  now_free = free();
  if (tier >= 0) s.release_while(tier, [&] { return (now_free = free()) < need; });
  return now_free;
}

expected<kv_export, error> kv_store::export_blocks(std::span<const std::uint64_t> keys, duration lease) {
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  auto& s = *state_;
  SPECGEN_KV_TRY(s.usable());
  s.purge_leases();
  kv_export e;
  e.block_bytes = s.bb;
  e.checksums = s.config.verify;
  detail::lease_info info;
  info.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(lease);
  std::map<std::pair<int, std::uint32_t>, std::uint32_t> slab_index;
  for (auto key : keys) {
    const auto* b = s.blocks.find(key);
    if (!b || b->at.tier == host_tier) break;
    const auto id = std::pair{b->at.tier, b->at.slab};
    auto si = slab_index.find(id);
    if (si == slab_index.end()) {
      auto& t = s.tiers[static_cast<std::size_t>(b->at.tier)];
      auto& slab = t.slabs.at(b->at.slab);
      if (!slab.ipc) {
        CUipcMemHandle h{};
        SPECGEN_KV_TRY(t.dev->use());
        SPECGEN_KV_TRY(kv_detail::check(s.api, s.api.cuIpcGetMemHandle(&h, slab.base), "cuIpcGetMemHandle"));
        slab.ipc = h;
      }
      si = slab_index.emplace(id, static_cast<std::uint32_t>(e.slabs.size())).first;
      e.slabs.push_back({t.dev->pci_bus_id,
                         kv_detail::to_hex(std::as_bytes(std::span(slab.ipc->reserved, sizeof slab.ipc->reserved))),
                         slab.bytes, s.tags_offset});
      info.slabs.insert(id);
    }
    e.blocks.push_back({key, si->second, b->at.slot});
  }
  s.blocks.touch(keys);
  e.lease = s.next_lease++;
  s.leases.emplace(e.lease, std::move(info));
  return e;
}

void kv_store::release(std::uint64_t lease) {
  std::lock_guard lock(state_->mutex);
  state_->leases.erase(lease);
}

std::vector<std::uint64_t> kv_store::chain(std::uint64_t handle) const {
  std::lock_guard lock(state_->mutex);
  for (auto it = state_->chains.rbegin(); it != state_->chains.rend(); ++it)
    if (it->back() == handle) return *it;
  return {};
}

std::size_t kv_store::resident(std::span<const std::uint64_t> keys) const {
  std::lock_guard lock(state_->mutex);
  std::size_t n = 0;
  while (n < keys.size() && state_->blocks.find(keys[n])) ++n;
  return n;
}

std::optional<kv_block_location> kv_store::locate(std::uint64_t key) const {
  std::lock_guard lock(state_->mutex);
  const auto* b = state_->blocks.find(key);
  if (!b) return std::nullopt;
  const int device = b->at.tier == host_tier ? -1 : state_->config.devices[static_cast<std::size_t>(b->at.tier)];
  return kv_block_location{device, state_->slot_address(b->at), b->checksum};
}

int kv_store::choose_device() const {
  std::lock_guard lock(state_->mutex);
  context_scope scope(state_->api);
  const int t = state_->choose_tier();
  return t == host_tier ? -1 : state_->config.devices[static_cast<std::size_t>(t)];
}

kv_store_stats kv_store::stats() const {
  std::lock_guard lock(state_->mutex);
  auto st = state_->stats;
  st.device_blocks = 0;
  st.device_bytes.clear();
  for (int t = 0; t < static_cast<int>(state_->tiers.size()); ++t) {
    st.device_blocks += state_->blocks.blocks(t);
    st.device_bytes.push_back(state_->tiers[static_cast<std::size_t>(t)].allocated);
  }
  st.host_blocks = state_->blocks.blocks(host_tier);
  st.host_bytes = state_->host_allocated;
  st.caller_seconds = static_cast<double>(state_->caller_ns.load()) / 1e9;
  st.caller_max_seconds = static_cast<double>(state_->caller_max_ns.load()) / 1e9;
  st.make_room_seconds = static_cast<double>(state_->make_room_ns.load()) / 1e9;
  return st;
}

const kv_store_config& kv_store::config() const noexcept { return state_->config; }

std::string kv_store::broken() const {
  std::lock_guard lock(state_->mutex);
  return state_->broken;
}

// ---- make_gpu_kv ------------------------------------------------------------------------------

namespace {
/// backed_kv owns its backing; the store is shared (the pool's hook calls make_room on it).
class shared_backing final : public kv_backing {
 public:
  explicit shared_backing(std::shared_ptr<kv_store> s) : s_(std::move(s)) {}
  std::size_t block_bytes() const noexcept override { return s_->block_bytes(); }
  std::uint64_t capacity_bytes() const noexcept override { return s_->capacity_bytes(); }
  expected<void, error> put(std::span<const std::uint64_t> k, std::span<const std::byte> b) override { return s_->put(k, b); }
  expected<duration, error> get(std::span<const std::uint64_t> k, std::span<std::byte> out) override { return s_->get(k, out); }
  void erase(std::span<const std::uint64_t> k) override { s_->erase(k); }
  std::uint64_t shrink(std::uint64_t bytes) override { return s_->shrink(bytes); }
  expected<void, error> put_synthetic(std::span<const std::uint64_t> k) override { return s_->put_synthetic(k); }
  expected<duration, error> fetch(std::span<const std::uint64_t> k, std::vector<std::byte>& staging) override {
    return s_->fetch(k, staging);
  }
  std::vector<std::uint64_t> take_dropped() override { return s_->take_dropped(); }

 private:
  std::shared_ptr<kv_store> s_;
};
}  // namespace

policy::any_kv make_gpu_kv(std::shared_ptr<kv_store> store, const kv_model& model) {
  if (!store) throw std::invalid_argument("make_gpu_kv: the store must not be null");
  if (store->block_bytes() != model.bytes_per_block())
    throw std::invalid_argument(fmt::format("make_gpu_kv: the store's blocks are {} bytes, the model's {}", store->block_bytes(),
                                            model.bytes_per_block()));
  return policy::any_kv(policy::backed_kv({.model = model}, std::make_unique<shared_backing>(std::move(store))));
}

expected<policy::any_kv, error> make_gpu_kv(const kv_model& model, kv_store_config config) {
  if (auto why = model.invalid(); !why.empty()) return unexpected(error{"make_gpu_kv: model: " + why});
  config.block_bytes = model.bytes_per_block();
  return kv_store::create(std::move(config)).transform([&](std::shared_ptr<kv_store> store) {
    return make_gpu_kv(std::move(store), model);
  });
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
