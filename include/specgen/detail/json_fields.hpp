#pragma once
/// Reading JSON objects field by field with errors that name the file, the
/// JSON pointer and the problem (`h200.json: /kernels/3/noise: must be a number in [0, 1], got -1`),
/// so a user can fix a hand-edited or generated file without a debugger.
///
/// Every JSON input of the library (task files, traces, cost tables,
/// simulator parameters, policy configs, journals, the OpenAI wire) reads
/// through these pieces: `field_reader` for an object's fields, `file_error`
/// for the error (`error::file` and `error::where`, the JSON pointer), and
/// `unknown_key_problem` for a key a format does not know. A format refuses
/// unknown keys (`field_reader::only`) unless it is deliberately open, which
/// its reader says in a comment.
#include <specgen/detail/config.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <concepts>
#include <initializer_list>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace detail {

/// `j` as a short text for an error message: at most `max_chars` characters
/// (cut at a UTF-8 boundary), and a summary instead of the text for a large
/// or deep document, which `dump` would walk recursively (a hostile config
/// nests arrays 100,000 levels deep).
inline std::string shown(const nlohmann::json& j, std::size_t max_chars = 60) {
  std::size_t budget = 64;  // nodes looked at before giving up on showing the text
  bool small = true;
  std::vector<const nlohmann::json*> stack{&j};
  while (!stack.empty() && small) {
    const nlohmann::json* n = stack.back();
    stack.pop_back();
    small = budget-- > 0 && (!n->is_structured() || n->size() <= budget);
    if (small && n->is_structured())
      for (const auto& child : *n) stack.push_back(&child);
  }
  if (!small)
    return fmt::format("{} of {} element{}", j.is_array() ? "an array" : "an object", j.size(), j.size() == 1 ? "" : "s");
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > max_chars) {
    std::size_t cut = max_chars - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  return s;
}

/// RFC 6901 escaping of one reference token.
inline std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// "unknown <noun> 'tolerence' (did you mean 'tolerance'?); <listed>: name, dtype, shape, tolerance":
/// the problem of a name outside `allowed`, with the nearest allowed name when it is a likely typo.
inline std::string unknown_name_problem(std::string_view noun, std::string_view key,
                                        std::span<const std::string_view> allowed, std::string_view listed = "allowed") {
  std::string msg = fmt::format("unknown {} '{}'", noun, key);
  if (allowed.empty()) return msg + "; the object takes no keys";
  const auto best = std::min_element(allowed.begin(), allowed.end(), [&](auto a, auto b) {
    return edit_distance(key, a) < edit_distance(key, b);
  });
  if (edit_distance(key, *best) <= 2) msg += fmt::format(" (did you mean '{}'?)", *best);
  return msg + fmt::format("; {}: {}", listed, fmt::join(allowed, ", "));
}
/// "unknown key 'tolerence' (did you mean 'tolerance'?); allowed: name, dtype, shape, tolerance".
inline std::string unknown_key_problem(std::string_view key, std::span<const std::string_view> allowed) {
  return unknown_name_problem("key", key, allowed);
}
inline std::string unknown_key_problem(std::string_view key, std::initializer_list<std::string_view> allowed) {
  return unknown_key_problem(key, std::span<const std::string_view>(allowed.begin(), allowed.size()));
}

/// The first key of object `j` outside `allowed`, if any.
inline std::optional<std::string> unknown_key(const nlohmann::json& j, std::initializer_list<std::string_view> allowed) {
  if (!j.is_object()) return std::nullopt;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) return it.key();
  return std::nullopt;
}

/// An error about the field at JSON pointer `pointer` ("" for the whole
/// document) of `file`: `what()` reads "file: /inputs/2/shape: problem".
inline error file_error(std::string file, std::string_view pointer, std::string problem) {
  return error{.message = std::move(problem), .file = std::move(file),
               .where = pointer.empty() ? std::string("/") : std::string(pointer)};
}

inline error json_error(std::string_view file, std::string_view pointer, std::string_view problem) {
  return file_error(std::string(file), pointer, std::string(problem));
}

/// `j` as a `T` when it is a number that `T` holds exactly (an integer type
/// needs an integer in its range); false otherwise.
template <class T>
bool number_value(const nlohmann::json& j, T& out) {
  if constexpr (std::floating_point<T>) {
    if (!j.is_number()) return false;
    out = j.get<T>();
    return true;
  } else {
    static_assert(std::integral<T> && !std::same_as<T, bool>);
    if (j.is_number_unsigned()) {
      const auto v = j.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
      out = static_cast<T>(v);
      return true;
    }
    if (!j.is_number_integer()) return false;
    const auto v = j.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (v < 0 || static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
    } else {
      if (v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) || v > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
        return false;
    }
    out = static_cast<T>(v);
    return true;
  }
}

/// Reads the fields of one JSON object; keeps the first error and ignores
/// every later read, so a parser is a flat chain of reads and one check.
class field_reader {
 public:
  field_reader(const nlohmann::json& obj, std::string_view file, std::string pointer)
      : obj_(obj), file_(file), pointer_(std::move(pointer)) {
    if (!obj_.is_object()) fail_at(pointer_, fmt::format("expected an object, found {}", obj_.type_name()));
  }

  template <class T>
  field_reader& required(std::string_view name, T& out) {
    return read<T, range<T>>(name, out, true, nullptr);
  }
  template <class T>
  field_reader& optional(std::string_view name, T& out) {
    return read<T, range<T>>(name, out, false, nullptr);
  }
  /// A number that must lie in `r` (see limits.hpp).
  template <class T>
  field_reader& required(std::string_view name, T& out, const range<T>& r) {
    return read(name, out, true, &r);
  }
  template <class T>
  field_reader& optional(std::string_view name, T& out, const range<T>& r) {
    return read(name, out, false, &r);
  }
  /// Records `problem` against field `name` unless `ok` (or an error came first).
  field_reader& check(bool ok, std::string_view name, std::string_view problem) {
    if (!ok && !err_) fail_at(path(name), problem);
    return *this;
  }
  /// Records `problem` against the object itself unless `ok` (or an error came first).
  field_reader& check_object(bool ok, std::string_view problem) {
    if (!ok && !err_) fail_at(pointer_, problem);
    return *this;
  }
  /// Refuses the first key outside `allowed`, naming the nearest allowed key.
  /// A format that must stay readable by older versions (or that a third party
  /// extends) does not call this, and says so where it is read.
  field_reader& only(std::initializer_list<std::string_view> allowed) {
    if (err_) return *this;
    if (auto k = unknown_key(obj_, allowed)) fail_at(path(*k), unknown_key_problem(*k, allowed));
    return *this;
  }

  [[nodiscard]] bool ok() const noexcept { return !err_.has_value(); }
  [[nodiscard]] const std::optional<error>& failure() const noexcept { return err_; }
  /// `value` when every read succeeded, else the first error.
  template <class T>
  [[nodiscard]] expected<T> result(T value) const {
    if (err_) return unexpected(*err_);
    return value;
  }
  [[nodiscard]] std::string path(std::string_view name) const {
    return fmt::format("{}/{}", pointer_, pointer_token(name));
  }

 private:
  template <class T, class R>
  field_reader& read(std::string_view name, T& out, bool required, const R* r) {
    if (err_) return *this;
    auto it = obj_.find(name);
    if (it == obj_.end()) {
      if (required) fail_at(path(name), "missing (required)");
      return *this;
    }
    const nlohmann::json& v = *it;
    if constexpr (std::same_as<T, std::string>) {
      if (!v.is_string()) return wrong_type(name, v, "a string");
      out = v.get<std::string>();
    } else if constexpr (std::same_as<T, bool>) {
      if (!v.is_boolean()) return wrong_type(name, v, "true or false");
      out = v.get<bool>();
    } else {
      static_assert(std::is_arithmetic_v<T>, "field_reader reads strings, booleans, numbers and integers");
      const range<T> checked = r ? *r : any_value<T>();
      T value{};
      if (!number_value(v, value)) return wrong_type(name, v, checked.describe());
      if (auto why = range_problem(value, checked); !why.empty()) {
        fail_at(path(name), why);
        return *this;
      }
      out = value;
    }
    return *this;
  }
  field_reader& wrong_type(std::string_view name, const nlohmann::json& v, std::string_view want) {
    fail_at(path(name), fmt::format("expected {}, found {} {}", want, v.type_name(), shown(v)));
    return *this;
  }
  void fail_at(std::string_view pointer, std::string_view problem) { err_ = json_error(file_, pointer, problem); }

  const nlohmann::json& obj_;
  std::string_view file_;
  std::string pointer_;
  std::optional<error> err_;
};

}  // namespace detail
SPECGEN_END_NAMESPACE
