#pragma once
// FNV-1a over 128 bits for the compile cache. Not cryptographic: it guards
// against accidental collisions and damaged files, where 128 bits make a
// false match practically impossible. Each field is length-prefixed so
// ("ab","c") and ("a","bc") differ.
#include <specgen/detail/config.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

class fnv1a_128 {
 public:
  fnv1a_128& add(std::string_view field) {
    std::uint64_t n = field.size();
    for (int i = 0; i < 8; ++i, n >>= 8) byte(static_cast<unsigned char>(n & 0xff));
    for (unsigned char c : field) byte(c);
    return *this;
  }
  [[nodiscard]] std::string hex() const {
    return fmt::format("{:016x}{:016x}", static_cast<std::uint64_t>(h_ >> 64), static_cast<std::uint64_t>(h_));
  }

 private:
  __extension__ using u128 = unsigned __int128;
  void byte(unsigned char c) {
    h_ ^= c;
    h_ *= prime_;
  }
  static constexpr u128 prime_ = (u128{1} << 88) | 0x13b;
  u128 h_ = (u128{0x6c62272e07bb0142ull} << 64) | 0x62b821756295c58dull;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
