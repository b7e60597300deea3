#pragma once
/// Splitting `n` elements into contiguous slices run on threads, for the
/// element-wise work on benchmark-sized buffers (generating inputs, comparing
/// outputs). Small inputs stay on the calling thread.
#include <specgen/detail/config.hpp>

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace detail {

/// Elements per slice below which another thread is not worth starting.
inline constexpr std::size_t min_slice_elements = std::size_t{1} << 18;

/// The number of slices `for_each_slice` uses for `n` elements and at most
/// `threads` threads (0: one per hardware thread).
inline std::size_t slice_count(std::size_t n, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<std::size_t>(n / min_slice_elements, 1, threads);
}

/// Calls `fn(k, first, last)` for the slices k = 0 .. slice_count(n, threads) - 1
/// of [0, n), in parallel (one slice inline when there is only one), and
/// returns once all are done. Slices are contiguous, in order and cover [0, n).
///
/// @code
///   specgen::detail::for_each_slice(n, 0, [&](std::size_t, std::size_t first, std::size_t last) { fill(first, last); });
/// @endcode
template <class Fn>
void for_each_slice(std::size_t n, unsigned threads, Fn&& fn) {
  const std::size_t parts = slice_count(n, threads);
  if (parts == 1) return fn(std::size_t{0}, std::size_t{0}, n);
  std::vector<std::jthread> pool;
  pool.reserve(parts);
  for (std::size_t k = 0; k < parts; ++k) pool.emplace_back([&fn, k, n, parts] { fn(k, n * k / parts, n * (k + 1) / parts); });
}

}  // namespace detail
SPECGEN_END_NAMESPACE
