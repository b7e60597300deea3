#pragma once
/// Reading JSON objects field by field with errors that name the file, the
/// JSON pointer and the problem (`h200.json: /kernels/3/noise: must be >= 0`),
/// so a user can fix a hand-edited or generated file without a debugger.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace detail {

inline error json_error(std::string_view file, std::string_view pointer, std::string_view problem) {
  return error{fmt::format("{}: {}: {}", file, pointer.empty() ? std::string_view("/") : pointer, problem)};
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
    return read(name, out, true);
  }
  template <class T>
  field_reader& optional(std::string_view name, T& out) {
    return read(name, out, false);
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
  template <class T>
  field_reader& read(std::string_view name, T& out, bool required) {
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
    } else if constexpr (std::same_as<T, double>) {
      if (!v.is_number()) return wrong_type(name, v, "a number");
      out = v.get<double>();
    } else {
      static_assert(std::integral<T>, "field_reader reads strings, booleans, numbers and integers");
      if (!v.is_number_integer()) return wrong_type(name, v, "an integer");
      if constexpr (std::is_unsigned_v<T>) {
        if (v.is_number_unsigned() || v.get<std::int64_t>() >= 0) out = v.get<T>();
        else fail_at(path(name), "must be >= 0");
      } else {
        out = v.get<T>();
      }
    }
    return *this;
  }
  field_reader& wrong_type(std::string_view name, const nlohmann::json& v, std::string_view want) {
    std::string shown = v.dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    fail_at(path(name), fmt::format("expected {}, found {} {}", want, v.type_name(), shown));
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
