#pragma once
/// The library's stable (non-cryptographic) hash functions, defined once:
/// FNV-1a for content and identity hashes that are persisted (candidate and
/// cost-table keys, journal fingerprints, KV block keys), and splitmix64 for
/// deterministic streams and mixing. Stable across platforms, compilers and
/// builds, unlike std::hash. XXH3, for fast content hashes whose value no
/// unversioned file keeps (input checksums, the compile cache's keys), is in
/// detail/xxh3.hpp.
#include <specgen/detail/config.hpp>

#include <cstdint>

SPECGEN_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::uint64_t fnv1a_offset = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t fnv1a_prime = 0x100000001b3ull;

/// One byte into a 64-bit FNV-1a state.
constexpr std::uint64_t fnv1a_byte(std::uint64_t h, unsigned char c) noexcept { return (h ^ c) * fnv1a_prime; }

/// The 8 little-endian bytes of `v` into a 64-bit FNV-1a state (the same on every platform).
constexpr std::uint64_t fnv1a_u64(std::uint64_t v, std::uint64_t h) noexcept {
  for (int i = 0; i < 8; ++i) h = fnv1a_byte(h, static_cast<unsigned char>((v >> (8 * i)) & 0xffu));
  return h;
}

/// splitmix64's increment (the golden ratio in 64 bits).
inline constexpr std::uint64_t splitmix64_gamma = 0x9e3779b97f4a7c15ull;

/// splitmix64's finaliser: a bijective 64-bit mix. Hashing a counter with it
/// is a counter-based generator, so element i never depends on element i-1.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// splitmix64's step on state `x`: the finaliser of `x` plus the increment.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept { return mix64(x + splitmix64_gamma); }

}  // namespace detail
SPECGEN_END_NAMESPACE
