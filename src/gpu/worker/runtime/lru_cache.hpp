#pragma once
// A least-recently-used map from string keys bounded by its entry count, for
// the worker's loaded modules: the bounded cache (gpu/common/bounded_cache.hpp)
// with a count only. Host code, tested on any machine.
#include "gpu/common/bounded_cache.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/**
 * At most `capacity` values by key; a lookup or an insert makes the entry the
 * most recent, and an insert beyond capacity drops the least recent. Values
 * are dropped by destruction, so hold shared pointers when a dropped value may
 * still be in use.
 *
 * @code
 *   lru_cache<int> c(2);
 *   c.put("a", 1); c.put("b", 2); c.find("a"); c.put("c", 3);   // drops "b"
 * @endcode
 */
template <class T>
class lru_cache {
 public:
  explicit lru_cache(std::size_t capacity) : cache_({.max_entries = capacity == 0 ? 1 : capacity}) {}

  /// The value under `key`, made most recent, or nullptr.
  T* find(std::string_view key) { return cache_.find(key); }
  /// Stores `value` under `key` (replacing one already there) as the most
  /// recent entry; drops the least recent beyond capacity.
  T& put(std::string key, T value) { return cache_.put(std::move(key), std::move(value)); }

  [[nodiscard]] bool contains(std::string_view key) const { return cache_.contains(key); }
  [[nodiscard]] std::size_t size() const noexcept { return cache_.size(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return cache_.bounds().max_entries; }
  void clear() noexcept { cache_.clear(); }

 private:
  bounded_cache<T> cache_;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
