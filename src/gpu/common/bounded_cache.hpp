#pragma once
/// The one in-memory cache of the GPU parts: values by string key, bounded by
/// an entry count, a byte budget, or both, dropping the least recently used
/// first. The worker's loaded modules and generated inputs, the evaluator's
/// reference outputs and the compiler's results are each a thin wrapper of it.
/// Host code, tested on any machine; not thread-safe (wrappers that are shared
/// between threads hold their own lock).
#include <specgen/detail/config.hpp>

#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <string_view>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/**
 * At most `max_entries` values and `max_bytes` bytes (each 0 for no limit),
 * the bytes being what the caller says each value weighs. find() and put()
 * make an entry the most recent; peek() does not, so a cache read only with
 * peek() drops its oldest entries first. Beyond a limit, the least recent
 * entries go, but never the newest: one value over the byte budget stays
 * alone until the next put. Values are dropped by destruction, so hold shared
 * pointers when a dropped value may still be in use.
 *
 * @code
 *   bounded_cache<int> c({.max_entries = 2});
 *   c.put("a", 1); c.put("b", 2); c.find("a"); c.put("c", 3);   // drops "b"
 * @endcode
 */
template <class V>
class bounded_cache {
 public:
  struct limits {
    std::size_t max_entries = 0;  ///< 0: no limit on the count
    std::size_t max_bytes = 0;    ///< 0: no limit on the bytes
  };

  explicit bounded_cache(limits l) : limits_(l) {}

  /// The value under `key`, made most recent, or nullptr.
  V* find(std::string_view key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    entries_.splice(entries_.begin(), entries_, it->second);
    return &it->second->value;
  }
  /// The value under `key`, its recency unchanged, or nullptr.
  [[nodiscard]] const V* peek(std::string_view key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->value;
  }
  [[nodiscard]] bool contains(std::string_view key) const { return index_.find(key) != index_.end(); }

  /// Stores `value` (weighing `bytes`) under `key`, replacing one already
  /// there, as the most recent entry; then drops the least recent beyond the limits.
  V& put(std::string key, V value, std::size_t bytes = 0) {
    if (auto it = index_.find(key); it != index_.end()) {
      bytes_ -= it->second->bytes;
      entries_.erase(it->second);
      index_.erase(it);
    }
    entries_.push_front(entry{key, std::move(value), bytes});
    bytes_ += bytes;
    index_.emplace(std::move(key), entries_.begin());
    while (entries_.size() > 1 && over_limits()) {
      bytes_ -= entries_.back().bytes;
      index_.erase(entries_.back().key);
      entries_.pop_back();
    }
    return entries_.front().value;
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] const limits& bounds() const noexcept { return limits_; }
  void clear() noexcept {
    index_.clear();
    entries_.clear();
    bytes_ = 0;
  }

 private:
  struct entry {
    std::string key;
    V value;
    std::size_t bytes;
  };
  [[nodiscard]] bool over_limits() const noexcept {
    return (limits_.max_entries && entries_.size() > limits_.max_entries) || (limits_.max_bytes && bytes_ > limits_.max_bytes);
  }

  limits limits_;
  std::size_t bytes_ = 0;
  std::list<entry> entries_;  // most recent first
  std::map<std::string, typename std::list<entry>::iterator, std::less<>> index_;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
