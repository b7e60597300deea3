#pragma once
/// The blocks every KV store is made of: the model's KV shape (`kv_model`),
/// the block keys of a token prefix (a hash chain over full blocks, as vLLM
/// identifies them, so equal prefixes share keys and a partial last block is
/// never cached), and `block_index`, the LRU residency index with owners that
/// the modelled stores (policy/kv.hpp) and `backed_kv` (kv/backed_kv.hpp) keep.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
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
 *   const std::vector<specgen::token_id> prefix(100, 7);
 *   auto keys = specgen::block_keys(prefix, 16);   // prefix.size() / 16 = 6 keys
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
 *   const std::vector<specgen::token_id> prefix(256, 7), longer_prefix(512, 7);
 *   const int search = 0;                                                    // the blocks' owner
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
  /// A copy is an independent index with the same blocks, owners and LRU order.
  block_index(const block_index& o) : capacity_(o.capacity_), lru_(o.lru_), blocks_(o.blocks_), stats_(o.stats_) { relink(); }
  block_index& operator=(const block_index& o) {
    if (this != &o) {
      capacity_ = o.capacity_;
      lru_ = o.lru_;
      blocks_ = o.blocks_;
      stats_ = o.stats_;
      relink();
    }
    return *this;
  }
  block_index(block_index&&) noexcept = default;  // a moved list keeps its nodes, so positions stay valid
  block_index& operator=(block_index&&) noexcept = default;
  ~block_index() = default;

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
  /// Points every entry at its own list node (after copying the list).
  void relink() {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) blocks_.at(*it).pos = it;
  }
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

SPECGEN_END_NAMESPACE
