#pragma once
// What the fuzz targets share: reporting a broken invariant with the input
// that broke it, C-escaped so it can be pasted into a reproducer file.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

/// A standalone driver's command line:
///   [--seconds S] [--iterations N] [--seed X] [--NAME VALUE for each of `extra`] [FILE...]
struct driver_options {
  double seconds = 0;
  std::uint64_t iterations = 0;
  std::uint64_t seed = 1;
  std::map<std::string, std::string, std::less<>> extra{};  ///< by name without "--"
  std::vector<std::string> files{};
};

/// The options, or nothing after printing the usage line (an unknown option).
inline std::optional<driver_options> parse_driver_options(int argc, char** argv, std::span<const std::string_view> extra,
                                                          std::string_view files_usage) {
  driver_options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool named = a.starts_with("--");
    const std::string_view name = named ? a.substr(2) : a;
    const bool known_extra = std::find(extra.begin(), extra.end(), name) != extra.end();
    if (named && (name == "seconds" || name == "iterations" || name == "seed" || known_extra) && i + 1 < argc) {
      const char* v = argv[++i];
      if (name == "seconds") o.seconds = std::strtod(v, nullptr);
      else if (name == "iterations") o.iterations = std::strtoull(v, nullptr, 10);
      else if (name == "seed") o.seed = std::strtoull(v, nullptr, 10);
      else o.extra[std::string(name)] = v;
    } else if (named) {
      std::string more;
      for (auto e : extra) more += " [--" + std::string(e) + " VALUE]";
      std::fprintf(stderr, "usage: %s [--seconds S] [--iterations N] [--seed X]%s [%.*s...]\n", argv[0], more.c_str(),
                   static_cast<int>(files_usage.size()), files_usage.data());
      return std::nullopt;
    } else {
      o.files.emplace_back(a);
    }
  }
  return o;
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
