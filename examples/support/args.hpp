#pragma once
// A small command-line reader shared by the programs: `--name value`,
// `--list a b c` and `--flag`, with errors that say which flag is wrong.
#include <specgen/detail/limits.hpp>

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace specgen::programs {

class args {
 public:
  /// `flags` take no value; every other `--name` takes one.
  args(int argc, char** argv, std::set<std::string> options, std::set<std::string> flags, int first = 1)
      : args(argc, argv, std::move(options), std::move(flags), {}, first) {}

  /// As above, and `lists` take every value up to the next `--option`
  /// (`--task-files a.json b.json --mode specgen`); a list may be repeated,
  /// its values adding up.
  args(int argc, char** argv, std::set<std::string> options, std::set<std::string> flags, std::set<std::string> lists,
       int first = 1)
      : options_(std::move(options)), flags_(std::move(flags)), lists_(std::move(lists)) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h") a = "--help";
      if (!a.starts_with("--")) {
        positional_.push_back(a);
        continue;
      }
      std::string name = a.substr(2), value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        if (flags_.count(name)) throw std::invalid_argument(fmt::format("--{} takes no value", name));
      } else if (lists_.count(name)) {
        auto& vs = lists_values_[name];
        const std::size_t before = vs.size();
        while (i + 1 < argc && !is_option(argv[i + 1])) vs.emplace_back(argv[++i]);
        if (vs.size() == before) throw std::invalid_argument(fmt::format("--{} needs at least one value", name));
        values_[name] = vs.back();
        continue;
      } else if (!flags_.count(name)) {
        if (!options_.count(name)) throw std::invalid_argument(fmt::format("unknown option --{} (try --help)", name));
        if (i + 1 >= argc) throw std::invalid_argument(fmt::format("--{} needs a value", name));
        value = argv[++i];
      }
      if (!flags_.count(name) && !options_.count(name) && !lists_.count(name))
        throw std::invalid_argument(fmt::format("unknown option --{} (try --help)", name));
      if (lists_.count(name)) lists_values_[name].push_back(value);
      values_[name] = value;
    }
  }

  [[nodiscard]] bool has(const std::string& name) const { return values_.count(name) > 0; }
  [[nodiscard]] std::string get(const std::string& name, std::string fallback = {}) const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  /// The value of `--name` as a number in `r` (the range the --help text
  /// gives), or `fallback` when the flag is absent. Anything else, "-1" for
  /// a count, "inf" or "nan" included, throws std::invalid_argument saying
  /// what the flag accepts. Without `r`, any finite value of T.
  template <class T>
  [[nodiscard]] T number(const std::string& name, T fallback, const detail::range<T>& r = detail::any_value<T>()) const {
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    const auto& s = it->second;
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc{} && p == s.data() + s.size() && r.contains(v)) return v;
    throw std::invalid_argument(fmt::format("--{} {}: must be {}", name, s, r.describe()));
  }
  /// Every value of a list option, in the order given (empty when absent).
  /// For any other option, its value as a list of one (or none).
  [[nodiscard]] std::vector<std::string> values(const std::string& name) const {
    if (auto it = lists_values_.find(name); it != lists_values_.end()) return it->second;
    if (auto it = values_.find(name); it != values_.end()) return {it->second};
    return {};
  }
  [[nodiscard]] const std::vector<std::string>& positional() const noexcept { return positional_; }

 private:
  /// What ends a list's values: the next `--option` (or `-h`).
  static bool is_option(std::string_view s) { return s.starts_with("--") || s == "-h"; }

  std::set<std::string> options_, flags_, lists_;
  std::map<std::string, std::string> values_;  ///< a list's last value, for has() and get()
  std::map<std::string, std::vector<std::string>> lists_values_;
  std::vector<std::string> positional_;
};

/// "a,b,,c" -> {"a", "b", "c"}: a comma-separated option value.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    auto c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    if (c > pos) out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

}  // namespace specgen::programs
