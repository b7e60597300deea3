#pragma once
/// Where a store keeps real KV bytes: the `kv_backing` interface (the GPU
/// KV store implements it over device memory of the evaluation GPUs) and
/// `host_backing`, which keeps them in host memory. Backings are resources,
/// not configuration: `backed_kv` (kv/backed_kv.hpp) shares one with its copies.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>
#include <specgen/detail/xxh3.hpp>
#include <specgen/kv/blocks.hpp>
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

/// Reads the time for a backing that measures its transfers: the engine's
/// clock (`clock::now()`), a wall clock for a benchmark, or none.
using kv_clock = std::function<timestamp()>;

/**
 * A `kv_backing` in host memory: one `std::vector<std::byte>` and an XXH3
 * checksum per block, checked on every `get` so corruption is reported
 * instead of served.
 *
 * `get` reports the copy's time as read from `clock`. The core reads no real
 * time of its own: without a clock (a replayed run, whose virtual time must
 * not depend on the host's speed) the reported time is zero.
 */
class host_backing final : public kv_backing {
 public:
  host_backing(std::uint64_t capacity_bytes, std::size_t block_bytes, kv_clock clock = {})
      : capacity_(capacity_bytes), block_bytes_(block_bytes), clock_(std::move(clock)) {
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
    // Measured, not modelled, when a clock is given: this is the real copy a host store performs.
    const timestamp start = clock_ ? clock_() : timestamp{0};
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
    return clock_ ? clock_() - start : duration{0};
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
    return detail::xxh3_64(b.data(), b.size());
  }
  std::uint64_t capacity_;
  std::size_t block_bytes_;
  kv_clock clock_;
  std::unordered_map<std::uint64_t, block> blocks_;
};

/// Produces the KV bytes of one block (key, its tokens, output of block_bytes).
/// A real store copies them from the server. An empty source means stand-in
/// bytes synthesised from the key (`kv_backing::put_synthetic`, where the
/// backing keeps its bytes), enough to exercise a store and its integrity checks.
using kv_block_source = std::function<void(std::uint64_t key, std::span<const token_id> tokens, std::span<std::byte> out)>;

SPECGEN_END_NAMESPACE
