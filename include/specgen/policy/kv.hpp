#pragma once
/// KV storage policies: keep the reasoning prefix's KV cache where forks can
/// fetch it instead of recomputing it.
///
/// At a trigger the engine calls `store(owner, prefix)`; for each fork it asks
/// `lease(prefix)` for what is cached and how long bringing it to the server
/// takes; when a search or round is over it calls `drop(owner)`. The prefix is
/// the token ids the KV covers; pass the prompt ids followed by the reasoning
/// ids, so that equal reasoning under different prompts never shares blocks.
///
/// Blocks are identified as vLLM does: a hash chain over full blocks of
/// `block_tokens` tokens, so equal prefixes share keys and a partial last block
/// is never cached.
///
/// @code
///   specgen::remote_gpu_kv kv{{.capacity_bytes = 32ull << 30}};
///   kv.store(search, prefix);                      // at the trigger
///   if (auto l = kv.lease(prefix))                 // for the fork
///     fork.kv = *l;                                // l->fetch_time: 10 us + bytes / 395 GB/s
///   kv.drop(search);                               // search done
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/**
 * The shape of a model's KV cache. Defaults: a 32B-class model with grouped
 * KV heads (Qwen2.5-32B's published config: 64 layers, 8 KV heads, head_dim
 * 128) in bf16, so 2 (K and V) x 64 x 8 x 128 x 2 bytes = 262,144 bytes =
 * 256 KiB per token, 4 MiB per 16-token block, 4 GiB for a 16K-token prefix.
 */
struct kv_model {
  int layers = 64;
  int kv_heads = 8;
  int head_dim = 128;
  int dtype_bytes = 2;    ///< bf16
  int block_tokens = 16;  ///< vLLM's default block size

  [[nodiscard]] constexpr std::uint64_t bytes_per_token() const noexcept {
    return 2ull * std::uint64_t(layers) * std::uint64_t(kv_heads) * std::uint64_t(head_dim) * std::uint64_t(dtype_bytes);
  }
  [[nodiscard]] constexpr std::uint64_t bytes_per_block() const noexcept {
    return bytes_per_token() * std::uint64_t(block_tokens);
  }
  /// The largest block: a store moves and checksums whole blocks.
  static constexpr std::uint64_t max_block_bytes = 1ull << 30;
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("layers", s.layers, detail::in(1, 1024));
    f("kv_heads", s.kv_heads, detail::in(1, 1024));
    f("head_dim", s.head_dim, detail::in(1, 1024));
    f("dtype_bytes", s.dtype_bytes, detail::in(1, 8));
    f("block_tokens", s.block_tokens, detail::in(1, 1024));
  }
  [[nodiscard]] std::string invalid() const {
    if (bytes_per_block() > max_block_bytes)
      return fmt::format("a block of {} bytes (2 x layers x kv_heads x head_dim x dtype_bytes x block_tokens) is over "
                         "the limit of {} bytes; use fewer block_tokens",
                         bytes_per_block(), max_block_bytes);
    return {};
  }
  friend bool operator==(const kv_model&, const kv_model&) = default;
  friend void to_json(nlohmann::json& j, const kv_model& m) { j = detail::write_fields(m); }
};

static_assert(kv_model{}.bytes_per_token() == 256 * 1024);

namespace detail {
/// splitmix64's finaliser: spreads FNV's weak low bits before the next link.
constexpr std::uint64_t block_mix(std::uint64_t x) noexcept { return mix64(x); }
}  // namespace detail

/**
 * Keys of the FULL blocks of `tokens`: key i hashes key i-1 and the ids of
 * block i, so two sequences share exactly the keys of their common full
 * blocks. A trailing partial block gets no key.
 *
 * @code
 *   auto keys = specgen::block_keys(prefix, 16);   // prefix.size() / 16 keys
 * @endcode
 */
inline std::vector<std::uint64_t> block_keys(std::span<const token_id> tokens, int block_tokens, std::uint64_t salt = 0) {
  if (block_tokens < 1) throw std::invalid_argument("block_keys: block_tokens must be >= 1");
  const std::size_t bt = static_cast<std::size_t>(block_tokens);
  std::vector<std::uint64_t> keys;
  keys.reserve(tokens.size() / bt);
  std::uint64_t parent = detail::block_mix(salt ^ 0x6b76626c6f636bull);  // "kvblock"
  for (std::size_t b = 0; b + bt <= tokens.size(); b += bt) {
    std::uint64_t h = detail::fnv1a_u64(parent, 0xcbf29ce484222325ull);
    for (std::size_t i = b; i < b + bt; ++i) h = detail::fnv1a_u64(static_cast<std::uint32_t>(tokens[i]), h);
    parent = detail::block_mix(h);
    keys.push_back(parent);
  }
  return keys;
}

struct block_index_stats {
  std::uint64_t hits = 0;       ///< blocks found by `match`
  std::uint64_t misses = 0;     ///< blocks asked for by `match` and not found (or after the first gap)
  std::uint64_t evictions = 0;  ///< blocks removed to make room (LRU or shrink)
  std::size_t resident = 0;     ///< blocks held now
  friend bool operator==(const block_index_stats&, const block_index_stats&) = default;
};

/**
 * Which KV blocks are resident, with LRU eviction and per-owner dropping.
 * Shared by the modelled stores here and the real GPU store (which keeps the
 * bytes and uses the keys this index returns to free them).
 *
 * A chain's leading blocks are kept most recently used: every longer prefix
 * needs them, and a chain with a hole is useless after the hole.
 *
 * @code
 *   specgen::block_index idx(1024);
 *   idx.insert(specgen::block_keys(prefix, 16), search);
 *   std::size_t cached = idx.match(specgen::block_keys(longer_prefix, 16));  // leading blocks present
 * @endcode
 */
class block_index {
 public:
  /// What an insertion changed, so a store can move bytes for exactly these keys.
  struct insert_result {
    std::vector<std::uint64_t> inserted;  ///< keys that were not resident before
    std::vector<std::uint64_t> evicted;   ///< keys removed to make room
  };

  explicit block_index(std::size_t capacity_blocks) : capacity_(capacity_blocks) {}

  /// Makes the leading `min(keys.size(), capacity())` keys resident for `owner`
  /// and most recently used, the first key most of all. Blocks beyond the
  /// capacity are not stored (a prefix of a prefix is still useful).
  insert_result insert(std::span<const std::uint64_t> keys, int owner) {
    insert_result r;
    const std::size_t n = std::min(keys.size(), capacity_);
    const auto chain = keys.first(n);
    // Protect the chain's resident blocks first, so making room never evicts them.
    for (auto k : chain)
      if (auto it = blocks_.find(k); it != blocks_.end()) touch(it->second);
    for (auto k : chain) {
      auto it = blocks_.find(k);
      if (it == blocks_.end()) {
        if (blocks_.size() >= capacity_) evict_lru(r.evicted);
        lru_.push_front(k);
        it = blocks_.emplace(k, entry{lru_.begin(), {}}).first;
        r.inserted.push_back(k);
      }
      auto& owners = it->second.owners;
      if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
    }
    touch_chain(chain);
    return r;
  }

  /// Makes the resident keys among `keys` most recently used, the first most of
  /// all (a chain read in order), and skips the others; counts no hit or miss.
  /// For a store whose own tiers keep their LRU order in a `block_index`.
  void touch(std::span<const std::uint64_t> keys) {
    for (auto k = keys.rbegin(); k != keys.rend(); ++k)
      if (auto it = blocks_.find(*k); it != blocks_.end()) touch(it->second);
  }

  /// Removes the `count` least recently used blocks (fewer if fewer are held)
  /// without lowering the capacity, least recently used first. A tiered store
  /// uses it to pick the blocks to move down a tier.
  std::vector<std::uint64_t> evict(std::size_t count) {
    std::vector<std::uint64_t> evicted;
    while (count-- > 0 && !lru_.empty()) evict_lru(evicted);
    return evicted;
  }

  /// Number of leading keys resident; touches them (they are about to be used).
  std::size_t match(std::span<const std::uint64_t> keys) {
    std::size_t n = 0;
    while (n < keys.size() && blocks_.contains(keys[n])) ++n;
    touch_chain(keys.first(n));
    stats_.hits += n;
    stats_.misses += keys.size() - n;
    return n;
  }

  [[nodiscard]] bool contains(std::uint64_t key) const { return blocks_.contains(key); }

  /// Removes `owner` from every block; blocks no other owner holds are freed. Returns the freed keys.
  std::vector<std::uint64_t> drop_owner(int owner) {
    std::vector<std::uint64_t> freed;
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      auto& owners = it->second.owners;
      owners.erase(std::remove(owners.begin(), owners.end(), owner), owners.end());
      if (owners.empty()) {
        freed.push_back(it->first);
        lru_.erase(it->second.pos);
        it = blocks_.erase(it);
      } else {
        ++it;
      }
    }
    return freed;
  }

  /// Removes these keys whoever owns them (e.g. their bytes were found corrupt). Returns the removed keys.
  std::vector<std::uint64_t> erase(std::span<const std::uint64_t> keys) {
    std::vector<std::uint64_t> removed;
    for (auto k : keys)
      if (auto it = blocks_.find(k); it != blocks_.end()) {
        lru_.erase(it->second.pos);
        blocks_.erase(it);
        removed.push_back(k);
      }
    return removed;
  }

  /// Memory pressure: lowers the capacity to `blocks`, evicting least recently used blocks. Returns the evicted keys.
  std::vector<std::uint64_t> shrink_to(std::size_t blocks) {
    std::vector<std::uint64_t> evicted;
    capacity_ = std::min(capacity_, blocks);
    while (blocks_.size() > capacity_) evict_lru(evicted);
    return evicted;
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
  [[nodiscard]] block_index_stats stats() const noexcept {
    auto s = stats_;
    s.resident = blocks_.size();
    return s;
  }
  /// Resident keys, most recently used first (for tests and diagnostics).
  [[nodiscard]] std::vector<std::uint64_t> lru_order() const { return {lru_.begin(), lru_.end()}; }

 private:
  struct entry {
    std::list<std::uint64_t>::iterator pos;
    std::vector<int> owners;
  };
  void touch(entry& e) { lru_.splice(lru_.begin(), lru_, e.pos); }
  void touch_chain(std::span<const std::uint64_t> chain) {
    for (auto k = chain.rbegin(); k != chain.rend(); ++k) touch(blocks_.at(*k));
  }
  void evict_lru(std::vector<std::uint64_t>& out) {
    const auto k = lru_.back();
    lru_.pop_back();
    blocks_.erase(k);
    out.push_back(k);
    ++stats_.evictions;
  }

  std::size_t capacity_;
  std::list<std::uint64_t> lru_;  // front = most recently used
  std::unordered_map<std::uint64_t, entry> blocks_;
  block_index_stats stats_;
};

/// A KV storage policy, as the engine calls it.
template <class S>
concept kv_policy = requires(S& s, const S& cs, int owner, std::span<const token_id> prefix) {
  { s.store(owner, prefix) } -> std::same_as<void>;                // at a trigger: keep this prefix's blocks
  { s.lease(prefix) } -> std::same_as<std::optional<kv_lease>>;    // for a fork: what is cached and the fetch time
  { s.drop(owner) } -> std::same_as<void>;                         // search done / round over
  { cs.name() } -> std::convertible_to<std::string>;
};

/// No KV storage: forks recompute the prefix on the server.
struct no_kv {
  void store(int, std::span<const token_id>) {}
  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id>) { return std::nullopt; }
  void drop(int) {}
  [[nodiscard]] std::string name() const { return "no_kv"; }
  [[nodiscard]] nlohmann::json config() const { return {{"no_kv", nlohmann::json::object()}}; }
};

namespace detail {

/// The largest store: 1 PiB, beyond any machine's memory.
inline constexpr std::uint64_t max_capacity_bytes = 1ull << 50;

/// Parameters of a store whose fetch time is modelled as one batched transfer.
template <class Tier>
struct tier_params {
  kv_model model{};
  std::uint64_t capacity_bytes = Tier::capacity_bytes;
  double bandwidth_gbps = Tier::bandwidth_gbps;  ///< GB/s = 1e9 bytes/s, for one large batched transfer
  double latency_us = Tier::latency_us;          ///< fixed cost per transfer
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("model", s.model);
    f("capacity_bytes", s.capacity_bytes, detail::in<std::uint64_t>(0, max_capacity_bytes));
    f("bandwidth_gbps", s.bandwidth_gbps, detail::in(1e-3, 1e5));
    f("latency_us", s.latency_us, detail::in(0.0, 1e6));
  }
  /// latency + bytes / bandwidth: the blocks travel as one batched copy.
  [[nodiscard]] duration fetch_time(std::uint64_t bytes) const {
    return seconds(latency_us * 1e-6 + static_cast<double>(bytes) / (bandwidth_gbps * 1e9));
  }
  friend bool operator==(const tier_params&, const tier_params&) = default;
  friend void to_json(nlohmann::json& j, const tier_params& p) { j = write_fields(p); }
};

/// Pinned host memory over PCIe 5.0 x16. 55 GB/s and 5 us were measured on an
/// H200 host (torch 2.11, pinned cudaMemcpyAsync timed with CUDA events,
/// 2026-11-30): 55.5 GB/s for 64 MiB-4 GiB copies, 80 us for a 4 MiB copy,
/// which leaves about 5 us of fixed cost per transfer (docs/policies.md has the
/// numbers). On PCIe 4.0 hosts (not measured here) set `bandwidth_gbps` lower.
/// 64 GiB of pinned memory is this project's choice.
struct host_tier {
  static constexpr std::string_view name = "host_kv";
  static constexpr std::uint64_t capacity_bytes = 64ull << 30;
  static constexpr double bandwidth_gbps = 55;
  static constexpr double latency_us = 5;
};

/// Spare memory of the validation/profiling GPUs. 395 GB/s: GPU-to-GPU copies
/// on an H200 pair for large transfers (the SpecGen paper; small per-block copies reach
/// only 1-11 GB/s, hence the one batched transfer). The paper does not give
/// the budget: 32 GiB per store (an H200 has 141 GB and evaluating kernels
/// uses little of it) and 10 us per transfer are this project's choices.
struct remote_gpu_tier {
  static constexpr std::string_view name = "remote_gpu_kv";
  static constexpr std::uint64_t capacity_bytes = 32ull << 30;
  static constexpr double bandwidth_gbps = 395;
  static constexpr double latency_us = 10;
};

/// A store that keeps only the index and models the fetch time of its tier.
template <class Tier>
class modelled_kv {
 public:
  using params = tier_params<Tier>;

  modelled_kv() : modelled_kv(params{}) {}
  explicit modelled_kv(params p)
      : p_((require_valid(p, Tier::name), p)), index_(static_cast<std::size_t>(p_.capacity_bytes / p_.model.bytes_per_block())) {}

  void store(int owner, std::span<const token_id> prefix) {
    index_.insert(block_keys(prefix, p_.model.block_tokens), owner);
  }
  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id> prefix) {
    const auto keys = block_keys(prefix, p_.model.block_tokens);
    const std::size_t n = index_.match(keys);
    if (n == 0) return std::nullopt;
    return kv_lease{.cached_tokens = n * std::uint64_t(p_.model.block_tokens),
                    .fetch_time = p_.fetch_time(n * p_.model.bytes_per_block()),
                    .handle = keys[n - 1]};
  }
  void drop(int owner) { index_.drop_owner(owner); }
  /// Memory pressure: keep at most `bytes` of blocks.
  void shrink_to_bytes(std::uint64_t bytes) {
    index_.shrink_to(static_cast<std::size_t>(bytes / p_.model.bytes_per_block()));
  }

  [[nodiscard]] std::string name() const { return std::string(Tier::name); }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }
  [[nodiscard]] nlohmann::json config() const { return {{name(), p_}}; }
  [[nodiscard]] block_index_stats stats() const noexcept { return index_.stats(); }
  [[nodiscard]] const block_index& index() const noexcept { return index_; }

 private:
  params p_;
  block_index index_;
};

}  // namespace detail

/// KV blocks in pinned host memory, fetched over PCIe (see detail::host_tier for the defaults).
using host_kv = detail::modelled_kv<detail::host_tier>;
/// KV blocks in the spare memory of evaluation GPUs, fetched over NVLink in one batch (the paper's remote KV).
using remote_gpu_kv = detail::modelled_kv<detail::remote_gpu_tier>;

namespace detail {
/// Stand-in KV bytes for a block: 8-byte little-endian word j is
/// `block_mix(key + (j + 1) * 0x9e3779b97f4a7c15)`. Counter-based, so a GPU
/// kernel writes exactly these bytes in parallel (src/gpu/kv) and a test can
/// check any block it fetched against this function.
inline void synthetic_block(std::uint64_t key, std::span<const token_id>, std::span<std::byte> out) {
  for (std::size_t j = 0; j * 8 < out.size(); ++j) {
    const std::uint64_t w = block_mix(key + (j + 1) * 0x9e3779b97f4a7c15ull);
    for (std::size_t b = 0; b < 8 && j * 8 + b < out.size(); ++b) out[j * 8 + b] = static_cast<std::byte>((w >> (8 * b)) & 0xffu);
  }
}
}  // namespace detail

/**
 * Where a store keeps real KV bytes. The GPU runtime implements it over device
 * memory of the evaluation GPUs; `host_backing` keeps them in host vectors.
 * Blocks move in batches (one transfer per call), in the order of `keys`.
 */
class kv_backing {
 public:
  virtual ~kv_backing() = default;
  /// Size of one block in bytes; `put`/`get` buffers are `keys.size()` blocks long.
  [[nodiscard]] virtual std::size_t block_bytes() const noexcept = 0;
  [[nodiscard]] virtual std::uint64_t capacity_bytes() const noexcept = 0;
  /// Stores the blocks (overwrites blocks already present).
  virtual expected<void, error> put(std::span<const std::uint64_t> keys, std::span<const std::byte> bytes) = 0;
  /// Copies the blocks into `out` as one transfer and returns its measured
  /// time; an error when a block is missing or fails its integrity check.
  virtual expected<duration, error> get(std::span<const std::uint64_t> keys, std::span<std::byte> out) = 0;
  virtual void erase(std::span<const std::uint64_t> keys) = 0;
  /// Memory pressure: lower the capacity to at most `bytes`. Returns the new capacity.
  virtual std::uint64_t shrink(std::uint64_t bytes) = 0;

  /// Stores the blocks with the bytes `detail::synthetic_block` makes from
  /// their keys, for runs without a model server (the replay model). The
  /// default synthesises them here and calls `put`; a GPU store writes them
  /// in device memory, so gigabytes of stand-in KV never cross the host.
  virtual expected<void, error> put_synthetic(std::span<const std::uint64_t> keys);
  /// Brings the blocks to where a fork's server reads them, as one batched
  /// transfer, and returns its measured time (an error as for `get`). The
  /// default `get`s them into `staging` (host memory, resized to fit); a GPU
  /// store copies them into GPU memory instead and leaves `staging` empty.
  virtual expected<duration, error> fetch(std::span<const std::uint64_t> keys, std::vector<std::byte>& staging);
  /// Keys the backing removed on its own since the last call (its own memory
  /// pressure, a failed integrity check), so that an index in front of it
  /// forgets them too. The default removes nothing on its own.
  virtual std::vector<std::uint64_t> take_dropped() { return {}; }
};

inline expected<void, error> kv_backing::put_synthetic(std::span<const std::uint64_t> keys) {
  const std::size_t bb = block_bytes();
  std::vector<std::byte> batch(keys.size() * bb);
  for (std::size_t i = 0; i < keys.size(); ++i)
    detail::synthetic_block(keys[i], {}, std::span<std::byte>(batch).subspan(i * bb, bb));
  return put(keys, batch);
}

inline expected<duration, error> kv_backing::fetch(std::span<const std::uint64_t> keys, std::vector<std::byte>& staging) {
  staging.resize(keys.size() * block_bytes());
  return get(keys, staging);
}

/**
 * A `kv_backing` in host memory: one `std::vector<std::byte>` and an FNV-1a
 * checksum per block, checked on every `get` so corruption is reported
 * instead of served.
 */
class host_backing final : public kv_backing {
 public:
  host_backing(std::uint64_t capacity_bytes, std::size_t block_bytes) : capacity_(capacity_bytes), block_bytes_(block_bytes) {
    if (block_bytes_ == 0) throw std::invalid_argument("host_backing: block_bytes must be >= 1");
  }

  [[nodiscard]] std::size_t block_bytes() const noexcept override { return block_bytes_; }
  [[nodiscard]] std::uint64_t capacity_bytes() const noexcept override { return capacity_; }

  expected<void, error> put(std::span<const std::uint64_t> keys, std::span<const std::byte> bytes) override {
    if (bytes.size() != keys.size() * block_bytes_)
      return unexpected(error{fmt::format("host_backing: put of {} blocks needs {} bytes, got {}", keys.size(),
                                          keys.size() * block_bytes_, bytes.size())});
    std::size_t added = 0;
    for (auto k : keys) added += blocks_.contains(k) ? 0 : 1;
    if ((blocks_.size() + added) * block_bytes_ > capacity_)
      return unexpected(error{fmt::format("host_backing: {} more blocks would exceed the capacity of {} bytes", added, capacity_)});
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto src = bytes.subspan(i * block_bytes_, block_bytes_);
      blocks_[keys[i]] = block{std::vector<std::byte>(src.begin(), src.end()), checksum(src)};
    }
    return {};
  }

  expected<duration, error> get(std::span<const std::uint64_t> keys, std::span<std::byte> out) override {
    if (out.size() != keys.size() * block_bytes_)
      return unexpected(error{fmt::format("host_backing: get of {} blocks needs {} bytes, got {}", keys.size(),
                                          keys.size() * block_bytes_, out.size())});
    // Measured, not modelled: this is the real copy a host store performs.
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto it = blocks_.find(keys[i]);
      if (it == blocks_.end())
        return unexpected(error{fmt::format("host_backing: block {:016x} is not stored", keys[i])});
      const auto& b = it->second;
      if (checksum(b.bytes) != b.sum)
        return unexpected(error{fmt::format("host_backing: block {:016x} failed its checksum: the stored KV bytes "
                                            "were corrupted; the block must be recomputed",
                                            keys[i])});
      std::memcpy(out.data() + i * block_bytes_, b.bytes.data(), block_bytes_);
    }
    return std::chrono::duration_cast<duration>(std::chrono::steady_clock::now() - start);
  }

  void erase(std::span<const std::uint64_t> keys) override {
    for (auto k : keys) blocks_.erase(k);
  }

  std::uint64_t shrink(std::uint64_t bytes) override {
    capacity_ = std::min(capacity_, bytes);
    return capacity_;
  }

  [[nodiscard]] std::size_t blocks() const noexcept { return blocks_.size(); }
  /// The stored bytes of one block (empty if absent): for tests and debugging;
  /// writing through it bypasses the checksum, which is the point.
  [[nodiscard]] std::span<std::byte> stored_bytes(std::uint64_t key) {
    auto it = blocks_.find(key);
    return it == blocks_.end() ? std::span<std::byte>{} : std::span<std::byte>(it->second.bytes);
  }

 private:
  struct block {
    std::vector<std::byte> bytes;
    std::uint64_t sum = 0;
  };
  static std::uint64_t checksum(std::span<const std::byte> b) noexcept {
    return fnv1a(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  }
  std::uint64_t capacity_;
  std::size_t block_bytes_;
  std::unordered_map<std::uint64_t, block> blocks_;
};

/// Produces the KV bytes of one block (key, its tokens, output of block_bytes).
/// A real store copies them from the server. An empty source means stand-in
/// bytes synthesised from the key (`kv_backing::put_synthetic`, where the
/// backing keeps its bytes), enough to exercise a store and its integrity checks.
using kv_block_source = std::function<void(std::uint64_t key, std::span<const token_id> tokens, std::span<std::byte> out)>;

/**
 * A store of real bytes: a `block_index` decides residency, a `kv_backing`
 * holds the bytes, and `lease` performs the batched fetch (`kv_backing::fetch`:
 * into a host staging buffer, or into GPU memory for the GPU store) and
 * reports its measured time. A fetch that fails its integrity check drops the
 * blocks involved and yields no lease (the fork recomputes); blocks the
 * backing drops on its own are forgotten at the next call.
 * Not copyable: it owns the backing's memory.
 *
 * @code
 *   specgen::backed_kv kv({.model = m}, std::make_unique<specgen::host_backing>(1ull << 30, m.bytes_per_block()));
 * @endcode
 */
class backed_kv {
 public:
  struct params {
    kv_model model{};
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("model", s.model);
    }
    friend bool operator==(const params&, const params&) = default;
    friend void to_json(nlohmann::json& j, const params& p) { j = detail::write_fields(p); }
  };

  backed_kv(params p, std::unique_ptr<kv_backing> backing, kv_block_source source = {})
      : p_((detail::require_valid(p, "backed_kv"), p)),
        backing_(backing ? std::move(backing) : throw std::invalid_argument("backed_kv: the backing must not be null")),
        source_(std::move(source)),
        index_(capacity_blocks()) {
    if (backing_->block_bytes() != p_.model.bytes_per_block())
      throw std::invalid_argument(fmt::format("backed_kv: the backing's blocks are {} bytes, the model's {}",
                                              backing_->block_bytes(), p_.model.bytes_per_block()));
  }
  backed_kv(backed_kv&&) noexcept = default;
  backed_kv& operator=(backed_kv&&) noexcept = default;

  void store(int owner, std::span<const token_id> prefix) {
    forget_dropped();
    const auto keys = block_keys(prefix, p_.model.block_tokens);
    auto r = index_.insert(keys, owner);
    backing_->erase(r.evicted);
    if (r.inserted.empty()) return;
    if (!source_) {
      if (auto ok = backing_->put_synthetic(r.inserted); !ok) {
        last_error_ = ok.error().message;
        index_.erase(r.inserted);
      }
      return;
    }
    // Inserted keys are not contiguous in general; gather their bytes into one batch.
    const std::size_t bb = backing_->block_bytes();
    std::vector<std::byte> batch(r.inserted.size() * bb);
    const auto bt = static_cast<std::size_t>(p_.model.block_tokens);
    for (std::size_t i = 0; i < r.inserted.size(); ++i) {
      const auto pos = static_cast<std::size_t>(std::find(keys.begin(), keys.end(), r.inserted[i]) - keys.begin());
      source_(r.inserted[i], prefix.subspan(pos * bt, bt), std::span<std::byte>(batch).subspan(i * bb, bb));
    }
    if (auto ok = backing_->put(r.inserted, batch); !ok) {
      last_error_ = ok.error().message;
      index_.erase(r.inserted);
    }
  }

  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id> prefix) {
    forget_dropped();
    const auto keys = block_keys(prefix, p_.model.block_tokens);
    const std::size_t n = index_.match(keys);
    if (n == 0) return std::nullopt;
    const auto leased = std::span<const std::uint64_t>(keys).first(n);
    auto took = backing_->fetch(leased, staging_);
    if (!took) {
      last_error_ = took.error().message;
      backing_->erase(index_.erase(leased));
      staging_.clear();
      return std::nullopt;
    }
    return kv_lease{.cached_tokens = n * std::uint64_t(p_.model.block_tokens), .fetch_time = *took, .handle = keys[n - 1]};
  }

  void drop(int owner) {
    forget_dropped();
    backing_->erase(index_.drop_owner(owner));
  }
  /// Memory pressure: keep at most `bytes` of blocks.
  void shrink_to_bytes(std::uint64_t bytes) {
    forget_dropped();
    backing_->shrink(bytes);
    backing_->erase(index_.shrink_to(capacity_blocks()));
  }

  [[nodiscard]] std::string name() const { return "backed_kv"; }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }
  [[nodiscard]] nlohmann::json config() const {
    return {{name(), {{"model", p_.model}, {"capacity_bytes", backing_->capacity_bytes()}}}};
  }
  [[nodiscard]] block_index_stats stats() const noexcept { return index_.stats(); }
  /// The bytes of the last successful lease, in block order (empty when the
  /// backing fetches into memory other than the host's, as the GPU store does).
  [[nodiscard]] std::span<const std::byte> last_fetch() const noexcept { return staging_; }
  /// Why the last failed put or fetch failed ("" if none did).
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  [[nodiscard]] kv_backing& backing() noexcept { return *backing_; }

 private:
  [[nodiscard]] std::size_t capacity_blocks() const {
    return static_cast<std::size_t>(backing_->capacity_bytes() / backing_->block_bytes());
  }
  void forget_dropped() { index_.erase(backing_->take_dropped()); }

  params p_;
  std::unique_ptr<kv_backing> backing_;
  kv_block_source source_;
  block_index index_;
  std::vector<std::byte> staging_;
  std::string last_error_;
};

static_assert(kv_policy<no_kv>);
static_assert(kv_policy<host_kv>);
static_assert(kv_policy<remote_gpu_kv>);
static_assert(kv_policy<backed_kv>);

/**
 * Any KV policy, chosen at run time. Move-only: a store owns its memory and
 * the engine holds exactly one.
 *
 * @code
 *   specgen::any_kv kv = specgen::remote_gpu_kv{};
 *   kv.store(0, prefix);
 *   if (auto s = kv.stats()) log(s->hits);
 * @endcode
 */
class any_kv {
 public:
  any_kv() : any_kv(no_kv{}) {}
  template <kv_policy S>
    requires(!std::same_as<std::remove_cvref_t<S>, any_kv>)
  any_kv(S s) : self_(std::make_unique<model<S>>(std::move(s))) {}  // NOLINT implicit by design

  void store(int owner, std::span<const token_id> prefix) { self_->store(owner, prefix); }
  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id> prefix) { return self_->lease(prefix); }
  void drop(int owner) { self_->drop(owner); }
  [[nodiscard]] std::string name() const { return self_->name(); }
  /// The JSON config `make_kv` rebuilds this policy from (empty store).
  [[nodiscard]] nlohmann::json config() const { return self_->config(); }
  /// Index statistics, for stores that keep an index.
  [[nodiscard]] std::optional<block_index_stats> stats() const { return self_->stats(); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual void store(int, std::span<const token_id>) = 0;
    virtual std::optional<kv_lease> lease(std::span<const token_id>) = 0;
    virtual void drop(int) = 0;
    virtual std::string name() const = 0;
    virtual nlohmann::json config() const = 0;
    virtual std::optional<block_index_stats> stats() const = 0;
  };
  template <class S>
  struct model final : concept_t {
    explicit model(S s) : s_(std::move(s)) {}
    void store(int o, std::span<const token_id> p) override { s_.store(o, p); }
    std::optional<kv_lease> lease(std::span<const token_id> p) override { return s_.lease(p); }
    void drop(int o) override { s_.drop(o); }
    std::string name() const override { return s_.name(); }
    nlohmann::json config() const override {
      if constexpr (requires { { s_.config() } -> std::convertible_to<nlohmann::json>; }) return s_.config();
      else return nlohmann::json{{"custom", std::string(s_.name())}};
    }
    std::optional<block_index_stats> stats() const override {
      if constexpr (requires { { s_.stats() } -> std::convertible_to<block_index_stats>; }) return s_.stats();
      else return std::nullopt;
    }
    S s_;
  };
  std::unique_ptr<concept_t> self_;
};

static_assert(kv_policy<any_kv>);

inline void to_json(nlohmann::json& j, const any_kv& kv) { j = kv.config(); }

namespace detail {
inline constexpr std::string_view kv_kinds = "no_kv, host_kv, remote_gpu_kv, backed_kv";

/// backed_kv's JSON form: the model and the host backing's capacity.
struct backed_kv_config {
  kv_model model{};
  std::uint64_t capacity_bytes = 1ull << 30;
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("model", s.model);
    // Real bytes in host memory: at most 1 TiB.
    f("capacity_bytes", s.capacity_bytes, in<std::uint64_t>(0, 1ull << 40));
  }
};

template <class S>
expected<any_kv, error> make_modelled_kv(const nlohmann::json& body, const std::string& what) {
  auto p = read_fields<typename S::params>(body, what);
  if (!p) return unexpected(p.error());
  return any_kv(S(std::move(*p)));
}
}  // namespace detail

/**
 * Builds a KV policy from JSON: `"no_kv"`, `{"host_kv": {...}}`,
 * `{"remote_gpu_kv": {"capacity_bytes": 34359738368, "bandwidth_gbps": 395}}`,
 * or `{"backed_kv": {"model": {...}, "capacity_bytes": N}}` (bytes kept in a
 * host_backing, synthesised from the keys).
 */
inline expected<any_kv, error> make_kv(const nlohmann::json& j) {
  auto cfg = detail::split_config(j, "kv", detail::kv_kinds);
  if (!cfg) return unexpected(cfg.error());
  const std::string what = "kv " + cfg->kind;
  if (cfg->kind == "no_kv") {
    if (!cfg->body->is_null() && !(cfg->body->is_object() && cfg->body->empty()))
      return unexpected(error{fmt::format("{}: takes no parameters, got {}", what, detail::shown(*cfg->body))});
    return any_kv(no_kv{});
  }
  if (cfg->kind == "host_kv") return detail::make_modelled_kv<host_kv>(*cfg->body, what);
  if (cfg->kind == "remote_gpu_kv") return detail::make_modelled_kv<remote_gpu_kv>(*cfg->body, what);
  if (cfg->kind == "backed_kv") {
    auto c = detail::read_fields<detail::backed_kv_config>(*cfg->body, what);
    if (!c) return unexpected(c.error());
    return any_kv(backed_kv({.model = c->model},
                            std::make_unique<host_backing>(c->capacity_bytes, c->model.bytes_per_block())));
  }
  return unexpected(error{fmt::format("kv: unknown kind '{}' (known: {})", cfg->kind, detail::kv_kinds)});
}

SPECGEN_END_NAMESPACE
