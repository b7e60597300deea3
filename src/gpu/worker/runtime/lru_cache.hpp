#pragma once
// A small least-recently-used map from string keys, for the worker's loaded
// modules. Host code, tested on any machine.
#include <specgen/detail/config.hpp>

#include <cstddef>
#include <list>
#include <string>
#include <string_view>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/**
 * At most `capacity` values by key; a lookup or an insert makes the entry the
 * most recent, and an insert beyond capacity drops the least recent. Linear
 * lookups: meant for a few dozen entries. Values are dropped by destruction,
 * so hold shared pointers when a dropped value may still be in use.
 *
 * @code
 *   lru_cache<int> c(2);
 *   c.put("a", 1); c.put("b", 2); c.find("a"); c.put("c", 3);   // drops "b"
 * @endcode
 */
template <class T>
class lru_cache {
 public:
  explicit lru_cache(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  /// The value under `key`, made most recent, or nullptr.
  T* find(std::string_view key) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return &entries_.front().second;
      }
    return nullptr;
  }

  /// Stores `value` under `key` (replacing one already there) as the most
  /// recent entry; drops the least recent beyond capacity.
  T& put(std::string key, T value) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == key) {
        entries_.erase(it);
        break;
      }
    entries_.emplace_front(std::move(key), std::move(value));
    while (entries_.size() > capacity_) entries_.pop_back();
    return entries_.front().second;
  }

  [[nodiscard]] bool contains(std::string_view key) const {
    for (const auto& e : entries_)
      if (e.first == key) return true;
    return false;
  }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  void clear() noexcept { entries_.clear(); }

 private:
  std::size_t capacity_;
  std::list<std::pair<std::string, T>> entries_;  // most recent first
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
