#pragma once
// What the fuzz targets share: reporting a broken invariant with the input
// that broke it, C-escaped so it can be pasted into a reproducer file.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <string_view>

namespace specgen::fuzz {

/// Prints "<program>: invariant broken: <what>", the context line (if any)
/// and the first 4000 bytes of `input`, then aborts.
[[noreturn]] inline void fail(const char* program, const char* what, std::string_view input,
                              std::string_view context = {}) {
  std::fprintf(stderr, "%s: invariant broken: %s\n", program, what);
  if (!context.empty()) std::fprintf(stderr, "%.*s\n", static_cast<int>(context.size()), context.data());
  std::fprintf(stderr, "input (%zu bytes, C-escaped, first 4000):\n\"", input.size());
  for (unsigned char c : input.substr(0, 4000)) {
    if (c == '\n') std::fputs("\\n\"\n\"", stderr);
    else if (c == '"' || c == '\\') std::fprintf(stderr, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) std::fprintf(stderr, "\\x%02x\"\"", c);
    else std::fputc(c, stderr);
  }
  std::fputs("\"\n", stderr);
  std::abort();
}

/// The mutations every target uses; a target adds its own beside them.
class byte_mutator {
 public:
  static constexpr std::size_t generic_edits = 6;

  explicit byte_mutator(std::uint64_t seed) : rng_(seed) {}

  /// A uniform number in [0, n); 0 when n is 0.
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }

  /// Generic edit `which` (below `generic_edits`) of `s`: insert a token of
  /// `dictionary`, delete a range, duplicate a range elsewhere, splice with
  /// `other`, overwrite a byte, or truncate.
  void generic(std::string& s, std::size_t which, std::span<const std::string_view> dictionary, const std::string& other) {
    switch (which) {
      case 0:
        s.insert(below(s.size() + 1), dictionary[below(dictionary.size())]);
        break;
      case 1:
        if (!s.empty()) {
          const std::size_t at = below(s.size());
          s.erase(at, below(std::min<std::size_t>(s.size() - at, 64) + 1));
        }
        break;
      case 2:
        if (!s.empty()) {
          const std::size_t at = below(s.size());
          const std::string piece = s.substr(at, below(256) + 1);
          s.insert(below(s.size() + 1), piece);
        }
        break;
      case 3:
        s = s.substr(0, below(s.size() + 1)) + other.substr(below(other.size() + 1));
        break;
      case 4:
        if (!s.empty()) s[below(s.size())] = static_cast<char>(below(256));
        break;
      default:
        s.resize(below(s.size() + 1));
        break;
    }
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace specgen::fuzz

/// Checks `cond`; the file defines `fail(const char* what)` around fuzz::fail.
#define FUZZ_CHECK(cond)        \
  do {                          \
    if (!(cond)) fail(#cond);   \
  } while (0)
