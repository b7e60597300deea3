#pragma once
// The GPU KV store's bookkeeping, without CUDA: which slot of which slab of
// which tier holds each block, the LRU order per tier (a core `block_index`
// each), and the plans that placing blocks or emptying a slab need: the
// copies to make, in order, and the blocks that leave the store. The store
// (store.cpp) carries the plans out on the GPUs; tests check them here.
#include <specgen/detail/config.hpp>
#include <specgen/policy/kv.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::kv_detail {

/// The tier index of the pinned host tier; GPUs are tiers 0..n-1.
inline constexpr int host_tier = -1;

struct slot_ref {
  int tier = host_tier;
  std::uint32_t slab = 0;  ///< slab id, unique within its tier
  std::uint32_t slot = 0;
  friend bool operator==(const slot_ref&, const slot_ref&) = default;
};

struct block_move {
  std::uint64_t key = 0;
  slot_ref from{}, to{};
  friend bool operator==(const block_move&, const block_move&) = default;
};

/// What a placement or an evacuation asks of the GPUs, in this order: first
/// `moved` (their sources are still intact), then writing `placed`.
struct plan {
  std::vector<std::pair<std::uint64_t, slot_ref>> placed{};  ///< blocks to write, in the order asked
  std::vector<block_move> moved{};                          ///< no two share a destination
  std::vector<std::uint64_t> dropped{};                     ///< left the store (or never entered it)
  std::size_t demoted = 0;                                  ///< moves from a GPU to the host tier
  std::size_t compacted = 0;                                ///< moves between slabs of one GPU
};

class layout {
 public:
  /// A new slab on `tier` if the memory allows: its id and slot count.
  using grow_fn = std::function<std::optional<std::pair<std::uint32_t, std::uint32_t>>(int tier)>;

  explicit layout(int device_tiers) : tiers_(static_cast<std::size_t>(device_tiers) + 1) {
    if (device_tiers < 0) throw std::invalid_argument("layout: device_tiers must be >= 0");
  }

  // ---- slabs -----------------------------------------------------------------------------
  void add_slab(int tier, std::uint32_t id, std::uint32_t slots) {
    auto& t = at(tier);
    if (slots == 0) throw std::invalid_argument("layout: a slab needs at least one slot");
    if (!t.slabs.emplace(id, slab_state(slots)).second)
      throw std::logic_error("layout: slab " + std::to_string(id) + " exists already");
    t.slots += slots;
  }
  /// Forgets an empty slab; a programming error while a block lives in it.
  void remove_slab(int tier, std::uint32_t id) {
    auto& t = at(tier);
    auto it = t.slabs.find(id);
    if (it == t.slabs.end()) throw std::logic_error("layout: no slab " + std::to_string(id));
    if (it->second.live != 0) throw std::logic_error("layout: slab " + std::to_string(id) + " still holds blocks");
    t.slots -= it->second.keys.size();
    t.slabs.erase(it);
  }
  [[nodiscard]] std::vector<std::uint32_t> slabs(int tier) const {
    std::vector<std::uint32_t> ids;
    for (const auto& [id, s] : at(tier).slabs) ids.push_back(id);
    return ids;
  }
  [[nodiscard]] std::size_t live(int tier, std::uint32_t id) const { return at(tier).slabs.at(id).live; }
  /// Keys in slab `id`, by slot.
  [[nodiscard]] std::vector<std::uint64_t> keys_in(int tier, std::uint32_t id) const {
    const auto& s = at(tier).slabs.at(id);
    std::vector<std::uint64_t> out;
    for (std::size_t i = 0; i < s.keys.size(); ++i)
      if (s.used[i]) out.push_back(s.keys[i]);
    return out;
  }
  /// The slab of `tier` with fewest live blocks that `allowed` accepts (the
  /// cheapest to empty), the newest among equals.
  [[nodiscard]] std::optional<std::uint32_t> emptiest(int tier, const std::function<bool(std::uint32_t)>& allowed) const {
    std::optional<std::uint32_t> best;
    std::size_t fewest = std::numeric_limits<std::size_t>::max();
    for (const auto& [id, s] : at(tier).slabs)
      if ((!allowed || allowed(id)) && s.live <= fewest) {
        fewest = s.live;
        best = id;
      }
    return best;
  }

  // ---- blocks ----------------------------------------------------------------------------
  struct block {
    slot_ref at{};
    std::uint64_t checksum = 0;
  };
  [[nodiscard]] const block* find(std::uint64_t key) const {
    auto it = blocks_.find(key);
    return it == blocks_.end() ? nullptr : &it->second;
  }
  void set_checksum(std::uint64_t key, std::uint64_t sum) {
    if (auto it = blocks_.find(key); it != blocks_.end()) it->second.checksum = sum;
  }

  /**
   * Places `keys` on `tier`: each key not held takes a free slot there, else
   * a new slab (`grow`), else the slot of the tier's least recently used
   * block, which moves down to the host tier (whose own least recently used
   * blocks leave the store to make room) or leaves the store. A key with no
   * room on `tier` at all goes to the host tier. Keys held already keep their
   * slot (their bytes are rewritten) and are never evicted by this placement.
   * The placed keys become the most recently used, the first most of all.
   */
  plan place(std::span<const std::uint64_t> keys, int tier, const grow_fn& grow) {
    plan p;
    const std::unordered_set<std::uint64_t> mine(keys.begin(), keys.end());
    touch(keys);
    std::map<int, std::vector<std::uint64_t>> fresh;  // per tier, in chain order
    for (auto key : keys) {
      if (auto it = blocks_.find(key); it != blocks_.end()) {
        p.placed.emplace_back(key, it->second.at);
        continue;
      }
      auto s = take_slot(tier, p, grow, mine);
      if (!s && tier != host_tier) s = take_slot(host_tier, p, grow, mine);
      if (!s) {
        p.dropped.push_back(key);
        continue;
      }
      occupy(*s, key);
      blocks_[key] = block{*s, 0};
      p.placed.emplace_back(key, *s);
      fresh[s->tier].push_back(key);
    }
    for (auto& [t, ks] : fresh) at(t).lru.insert(ks, 0);
    return p;
  }

  /**
   * Empties slab `id` of `tier`: its blocks move to free slots of the tier's
   * other slabs, else down to the host tier (a device tier), else out of the
   * store. Afterwards the slab is empty and may be removed once the moves are done.
   */
  plan evacuate(int tier, std::uint32_t id, const grow_fn& grow) {
    plan p;
    const auto keys = keys_in(tier, id);
    const std::unordered_set<std::uint64_t> mine(keys.begin(), keys.end());
    for (auto key : keys) {
      const slot_ref from = blocks_.at(key).at;
      std::optional<slot_ref> to = free_slot(tier, id);
      if (to) {
        ++p.compacted;
      } else if (tier != host_tier) {
        to = take_slot(host_tier, p, grow, mine);
        if (to) ++p.demoted;
      }
      vacate(from);
      if (!to) {
        at(tier).lru.erase(std::span(&key, 1));
        blocks_.erase(key);
        p.dropped.push_back(key);
        continue;
      }
      occupy(*to, key);
      blocks_[key].at = *to;
      if (to->tier != tier) {
        at(tier).lru.erase(std::span(&key, 1));
        at(to->tier).lru.insert(std::span(&key, 1), 0);
      }
      p.moved.push_back({key, from, *to});
    }
    return p;
  }

  /// Removes a block (its slot becomes free); what it was, if held.
  std::optional<block> remove(std::uint64_t key) {
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return std::nullopt;
    block b = it->second;
    vacate(b.at);
    at(b.at.tier).lru.erase(std::span(&key, 1));
    blocks_.erase(it);
    return b;
  }

  /// Marks the held keys among `keys` most recently used in their tiers, the first most of all.
  void touch(std::span<const std::uint64_t> keys) {
    for (auto& t : tiers_) t.lru.touch(keys);
  }

  /// Least recently used first (tests, diagnostics).
  [[nodiscard]] std::vector<std::uint64_t> lru_order(int tier) const {
    auto v = at(tier).lru.lru_order();
    return {v.rbegin(), v.rend()};
  }
  [[nodiscard]] std::size_t blocks(int tier) const { return at(tier).lru.size(); }
  [[nodiscard]] std::size_t slots(int tier) const { return at(tier).slots; }
  [[nodiscard]] std::size_t free_slots(int tier) const {
    std::size_t n = 0;
    for (const auto& [id, s] : at(tier).slabs) n += s.keys.size() - s.live;
    return n;
  }
  [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
  [[nodiscard]] int device_tiers() const noexcept { return static_cast<int>(tiers_.size()) - 1; }

 private:
  struct slab_state {
    explicit slab_state(std::uint32_t slots) : keys(slots, 0), used(slots, false) {
      for (std::uint32_t i = slots; i-- > 0;) free.push_back(i);  // slot 0 first
    }
    std::vector<std::uint64_t> keys;
    std::vector<bool> used;
    std::vector<std::uint32_t> free;
    std::size_t live = 0;
  };
  struct tier_state {
    std::map<std::uint32_t, slab_state> slabs;  // by id: older slabs fill first, newer ones drain first
    block_index lru{std::numeric_limits<std::size_t>::max()};  // never evicts by itself: slots limit a tier
    std::size_t slots = 0;
  };

  tier_state& at(int tier) {
    if (tier < host_tier || tier >= device_tiers()) throw std::out_of_range("layout: no tier " + std::to_string(tier));
    return tiers_[static_cast<std::size_t>(tier + 1)];
  }
  const tier_state& at(int tier) const { return const_cast<layout*>(this)->at(tier); }

  /// A free slot of `tier` outside slab `except`, from the oldest slab with one.
  std::optional<slot_ref> free_slot(int tier, std::optional<std::uint32_t> except = std::nullopt) {
    for (auto& [id, s] : at(tier).slabs)
      if (id != except && !s.free.empty()) return slot_ref{tier, id, s.free.back()};
    return std::nullopt;
  }

  void occupy(const slot_ref& r, std::uint64_t key) {
    auto& s = at(r.tier).slabs.at(r.slab);
    if (s.used[r.slot]) throw std::logic_error("layout: slot in use");
    std::erase(s.free, r.slot);
    s.used[r.slot] = true;
    s.keys[r.slot] = key;
    ++s.live;
  }
  void vacate(const slot_ref& r) {
    auto& s = at(r.tier).slabs.at(r.slab);
    if (!s.used[r.slot]) throw std::logic_error("layout: slot already free");
    s.used[r.slot] = false;
    s.keys[r.slot] = 0;
    s.free.push_back(r.slot);
    --s.live;
  }

  /// The least recently used block of `tier` not in `keep`, taken out of the tier's LRU order.
  std::optional<std::uint64_t> pop_victim(int tier, const std::unordered_set<std::uint64_t>& keep) {
    auto& lru = at(tier).lru;
    std::vector<std::uint64_t> kept;
    std::optional<std::uint64_t> victim;
    while (!victim) {
      const auto e = lru.evict(1);
      if (e.empty()) break;
      if (keep.contains(e[0])) kept.push_back(e[0]);
      else victim = e[0];
    }
    if (!kept.empty()) lru.insert(std::vector<std::uint64_t>(kept.rbegin(), kept.rend()), 0);  // in use now
    return victim;
  }

  /// A slot on `tier` for a new occupant (not yet occupied): free, grown, or
  /// taken from the tier's least recently used block outside `keep`.
  std::optional<slot_ref> take_slot(int tier, plan& p, const grow_fn& grow, const std::unordered_set<std::uint64_t>& keep) {
    if (auto s = free_slot(tier)) return s;
    if (grow)
      if (auto g = grow(tier)) {
        add_slab(tier, g->first, g->second);
        return free_slot(tier);
      }
    const auto victim = pop_victim(tier, keep);
    if (!victim) return std::nullopt;
    const slot_ref from = blocks_.at(*victim).at;
    if (tier == host_tier) {
      // Out of the store. If it came down in this very plan its copy is moot,
      // and must go: the slot is about to receive another block.
      p.demoted -= std::erase_if(p.moved, [&](const block_move& m) { return m.key == *victim; });
      vacate(from);
      blocks_.erase(*victim);
      p.dropped.push_back(*victim);
      return from;
    }
    auto to = take_slot(host_tier, p, grow, keep);
    vacate(from);
    if (to) {
      occupy(*to, *victim);
      blocks_[*victim].at = *to;
      at(host_tier).lru.insert(std::span(&*victim, 1), 0);
      p.moved.push_back({*victim, from, *to});
      ++p.demoted;
    } else {
      blocks_.erase(*victim);
      p.dropped.push_back(*victim);
    }
    return from;
  }

  std::vector<tier_state> tiers_;  // [0] is the host tier, [1 + d] GPU tier d
  std::unordered_map<std::uint64_t, block> blocks_;
};

}  // namespace gpu::kv_detail
SPECGEN_END_NAMESPACE
