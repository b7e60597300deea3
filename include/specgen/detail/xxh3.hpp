#pragma once
/// XXH3 (xxHash 0.8) for the content hashes where speed matters and nothing
/// persists the value across versions: the before/after checksum of a kernel's
/// inputs (a 64 MiB buffer twice per validation) and the compile cache's keys
/// (whose on-disk format carries a version). Identity hashes that are
/// persisted or recomputed by CUDA kernels stay FNV-1a (detail/hash.hpp).
///
/// xxhash.h is used header-only (XXH_INLINE_ALL): the header-only core needs
/// the header (Debian: libxxhash-dev) but no library at link time, and its
/// inlined copies are renamed so they never clash with a linked libxxhash.
#include <specgen/detail/config.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#define SPECGEN_DEFINED_XXH_INLINE_ALL
#endif
#include <xxhash.h>
#ifdef SPECGEN_DEFINED_XXH_INLINE_ALL
#undef XXH_INLINE_ALL
#undef SPECGEN_DEFINED_XXH_INLINE_ALL
#endif

SPECGEN_BEGIN_NAMESPACE
namespace detail {

/// XXH3's 64-bit hash of `n` bytes at `p` (the same on every platform).
inline std::uint64_t xxh3_64(const void* p, std::size_t n) noexcept { return XXH3_64bits(p, n); }

/// XXH3's 128-bit hash over a sequence of fields, each length-prefixed so
/// ("ab","c") and ("a","bc") differ. Not cryptographic: it guards against
/// accidental collisions and damaged files, where 128 bits make a false match
/// practically impossible.
class xxh3_128 {
 public:
  xxh3_128() noexcept { XXH3_128bits_reset(&state_); }
  xxh3_128(const xxh3_128&) = delete;
  xxh3_128& operator=(const xxh3_128&) = delete;

  xxh3_128& add(std::string_view field) noexcept {
    unsigned char n[8];
    std::uint64_t size = field.size();
    for (auto& b : n) b = static_cast<unsigned char>(size & 0xffu), size >>= 8;  // little-endian everywhere
    XXH3_128bits_update(&state_, n, sizeof n);
    XXH3_128bits_update(&state_, field.data(), field.size());
    return *this;
  }
  /// 32 hex digits, the high half first.
  [[nodiscard]] std::string hex() const {
    const XXH128_hash_t h = XXH3_128bits_digest(&state_);
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
  }

 private:
  XXH3_state_t state_;
};

}  // namespace detail
SPECGEN_END_NAMESPACE
