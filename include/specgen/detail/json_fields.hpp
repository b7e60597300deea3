#pragma once
/// Reading JSON objects field by field with errors that name the file, the
/// JSON pointer and the problem (`h200.json: /kernels/3/noise: must be a number in [0, 1], got -1`),
/// so a user can fix a hand-edited or generated file without a debugger.
#include <specgen/detail/config.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
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

/// An error about the field at JSON pointer `pointer` ("" for the whole
/// document) of `file`: `what()` reads "file: /inputs/2/shape: problem".
inline error file_error(std::string file, std::string_view pointer, std::string problem) {
  return error{.message = std::move(problem), .file = std::move(file),
               .where = pointer.empty() ? std::string("/") : std::string(pointer)};
}

inline error json_error(std::string_view file, std::string_view pointer, std::string_view problem) {
  return error{fmt::format("{}: {}: {}", file, pointer.empty() ? std::string_view("/") : pointer, problem)};
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

  [[nodiscard]] bool ok() const noexcept { return !err_.has_value(); }
  [[nodiscard]] const std::optional<error>& failure() const noexcept { return err_; }
  [[nodiscard]] std::string path(std::string_view name) const { return fmt::format("{}/{}", pointer_, name); }

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
