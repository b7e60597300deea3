#pragma once
/// Reading JSON objects field by field with errors that name the file, the
/// JSON pointer and the problem (`h200.json: /kernels/3/noise: must be a number in [0, 1], got -1`),
/// so a user can fix a hand-edited or generated file without a debugger.
///
/// Every JSON input of the library (task files, traces, cost tables,
/// simulator parameters, policy configs, journals, reports, the OpenAI wire,
/// worker answers) reads through these pieces: `field_reader` for an object's
/// fields, `file_error` for the error (`error::file` and `error::where`, the
/// JSON pointer), and `unknown_key_problem` for a key a format does not know.
/// A format refuses unknown keys (`field_reader::only`) unless it is
/// deliberately open, which its reader says in a comment.
///
/// The open formats (journals and the core's value types in json.hpp, the
/// report's inputs, the OpenAI wire, worker answers) read with the second
/// half of this header: a missing or null key keeps its default, an unknown
/// key is ignored, and a value of the wrong type is an error naming its JSON
/// pointer. `read_key` and `read_json` throw `json_read_error` (what a
/// `from_json` must do), whose pointer grows by one key per level as it
/// passes up through the nested reads; the top-level reader catches it and
/// returns `json_read_error::at(file, line)`. Nothing is thrown, and no
/// pointer is built, while the input is well-formed, so a hot path (a
/// stream's events) reads with these too.
#include <specgen/detail/config.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <concepts>
#include <initializer_list>
#include <cstdint>
#include <limits>
#include <map>
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

/// "expected a string, found number 5": the problem of a value of the wrong type.
inline std::string wrong_type_problem(std::string_view want, const nlohmann::json& v) {
  return fmt::format("expected {}, found {} {}", want, v.type_name(), shown(v));
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
    fail_at(path(name), wrong_type_problem(want, v));
    return *this;
  }
  void fail_at(std::string_view pointer, std::string_view problem) { err_ = json_error(file_, pointer, problem); }

  const nlohmann::json& obj_;
  std::string_view file_;
  std::string pointer_;
  std::optional<error> err_;
};

// ---- open formats ------------------------------------------------------------------

/// An error in a value of an open format, thrown by `read_json`, `read_key`
/// and the `from_json` of the core's value types (json.hpp): the JSON pointer
/// of the value at fault, relative to the value being read, and what is
/// wrong with it; `what()` reads "/mismatch/max_abs: expected a number ...".
/// It is a `nlohmann::json::exception`, so code that catches those around a
/// `j.get<T>()` catches it too.
class json_read_error : public nlohmann::json::exception {
 public:
  json_read_error(std::string pointer, std::string problem)
      : nlohmann::json::exception(302, "specgen::detail::json_read_error"),
        pointer_(std::move(pointer)),
        problem_(std::move(problem)) {
    render();
  }
  /// The error of a strict reader (`field_reader`), for a `from_json` that must throw it.
  explicit json_read_error(const error& e) : json_read_error(e.where == "/" ? std::string() : e.where, e.message) {}

  [[nodiscard]] const char* what() const noexcept override { return text_.c_str(); }
  [[nodiscard]] const std::string& pointer() const noexcept { return pointer_; }
  [[nodiscard]] const std::string& problem() const noexcept { return problem_; }

  /// Puts a key (or an array index) in front of the pointer: the read of the
  /// value that holds the faulty one calls this, then rethrows.
  void nest(std::string_view key) {
    pointer_.insert(0, "/" + pointer_token(key));
    render();
  }
  void nest(std::size_t index) {
    pointer_.insert(0, "/" + std::to_string(index));
    render();
  }

  /// The library's error value: the value at fault is in `file` (on `line`,
  /// for a JSONL file; 0 for none), and `what()` reads
  /// "run.jsonl: line 7: /candidate/prov/round: expected an integer ...".
  [[nodiscard]] error at(std::string file, std::size_t line = 0) const {
    error e = file_error(std::move(file), pointer_, problem_);
    e.line = static_cast<int>(std::min<std::size_t>(line, INT_MAX));
    return e;
  }

 private:
  void render() { text_ = pointer_.empty() ? problem_ : fmt::format("{}: {}", pointer_, problem_); }

  std::string pointer_;
  std::string problem_;
  std::string text_;
};

/// The value at `key` of object `obj`, or nullptr when the key is absent or
/// null (or `obj` is not an object): how an open format finds an optional key.
inline const nlohmann::json* present(const nlohmann::json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

template <class T>
concept json_scalar = std::same_as<T, std::string> || std::same_as<T, bool> || std::is_arithmetic_v<T> ||
                      std::same_as<T, std::chrono::nanoseconds>;

/// `j` as a `T` of an open format: "" when it is one (and then in `out`),
/// else what is wrong ("expected a string, found number 5"; `out` keeps its
/// value). `T` is a string, a bool, an integer type (an integer it holds), a
/// floating-point type (a number, or "inf", "-inf" or "nan": JSON has no such
/// numbers, so json.hpp writes them as strings) or nanoseconds (an integer).
template <json_scalar T>
std::string read_scalar(const nlohmann::json& j, T& out) {
  if constexpr (std::same_as<T, std::string>) {
    if (!j.is_string()) return wrong_type_problem("a string", j);
    out = j.get_ref<const std::string&>();
  } else if constexpr (std::same_as<T, bool>) {
    if (!j.is_boolean()) return wrong_type_problem("true or false", j);
    out = j.get<bool>();
  } else if constexpr (std::same_as<T, std::chrono::nanoseconds>) {
    typename T::rep ns = 0;
    if (!number_value(j, ns)) return wrong_type_problem("an integer (nanoseconds)", j);
    out = T(ns);
  } else if constexpr (std::floating_point<T>) {
    if (j.is_number()) {
      out = j.get<T>();
    } else if (const auto* s = j.get_ptr<const std::string*>(); s && (*s == "inf" || *s == "-inf" || *s == "nan")) {
      out = *s == "nan" ? std::numeric_limits<T>::quiet_NaN()
                        : (*s == "inf" ? 1 : -1) * std::numeric_limits<T>::infinity();
    } else {
      return wrong_type_problem("a number (or \"inf\", \"-inf\", \"nan\")", j);
    }
  } else {
    if (!number_value(j, out)) return wrong_type_problem(any_value<T>().describe(), j);
  }
  return {};
}

template <class T>
struct is_std_optional : std::false_type {};
template <class T>
struct is_std_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_std_vector : std::false_type {};
template <class T, class A>
struct is_std_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_string_map : std::false_type {};
template <class T, class C, class A>
struct is_string_map<std::map<std::string, T, C, A>> : std::true_type {};

/// "type must be string, but is number": an exception's text without
/// nlohmann's "[json.exception.type_error.302] " in front.
inline std::string without_exception_tag(std::string_view what) {
  if (what.starts_with("[json.exception.")) {
    const auto end = what.find("] ");
    if (end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  return std::string(what);
}

/// `read()`, the read of the value at key (or index) `token` of the value
/// being read: a json_read_error from it gets the token in front of its
/// pointer. Returns what `read` returns.
template <class Token, class F>
decltype(auto) nested_in(const Token& token, F&& read) {
  try {
    return std::forward<F>(read)();
  } catch (json_read_error& err) {
    if constexpr (std::is_integral_v<Token>) err.nest(static_cast<std::size_t>(token));
    else err.nest(std::string_view(token));
    throw;
  }
}

/// Reads `j` as a `T` of an open format: a scalar (`read_scalar`), the JSON
/// itself, an optional (null is empty), a vector (an array), a map from
/// strings (an object), or a type with its own `from_json`. Throws
/// `json_read_error`, its pointer relative to `j`.
template <class T>
void read_json(const nlohmann::json& j, T& out) {
  if constexpr (std::same_as<T, nlohmann::json>) {
    out = j;
  } else if constexpr (json_scalar<T>) {
    if (auto why = read_scalar(j, out); !why.empty()) throw json_read_error({}, std::move(why));
  } else if constexpr (is_std_optional<T>::value) {
    if (j.is_null()) {
      out.reset();
    } else {
      typename T::value_type v{};
      read_json(j, v);
      out = std::move(v);
    }
  } else if constexpr (is_std_vector<T>::value) {
    if (!j.is_array()) throw json_read_error({}, wrong_type_problem("an array", j));
    T v;
    v.reserve(j.size());
    for (std::size_t i = 0; i < j.size(); ++i) {
      typename T::value_type e{};
      nested_in(i, [&] { read_json(j[i], e); });
      v.push_back(std::move(e));
    }
    out = std::move(v);
  } else if constexpr (is_string_map<T>::value) {
    if (!j.is_object()) throw json_read_error({}, wrong_type_problem("an object", j));
    T m;
    for (auto it = j.begin(); it != j.end(); ++it) nested_in(it.key(), [&] { read_json(it.value(), m[it.key()]); });
    out = std::move(m);
  } else {
    try {
      out = j.get<T>();
    } catch (json_read_error&) {
      throw;
    } catch (const nlohmann::json::exception& e) {  // a from_json that throws nlohmann's own errors
      throw json_read_error({}, without_exception_tag(e.what()));
    }
  }
}

/// Reads key `key` of object `obj` into `out`, for an open format: true when
/// it was there. An absent or null key leaves `out` as it is (its default),
/// except that an optional is reset: an empty optional is an absent key.
/// Throws `json_read_error` when `obj` is not an object or the value is not
/// a `T`, its pointer starting at the key.
template <class T>
bool read_key(const nlohmann::json& obj, std::string_view key, T& out) {
  if (!obj.is_object()) throw json_read_error({}, wrong_type_problem("an object", obj));
  const nlohmann::json* v = present(obj, key);
  if (v == nullptr) {
    if constexpr (is_std_optional<T>::value) out.reset();
    return false;
  }
  nested_in(key, [&] { read_json(*v, out); });
  return true;
}

/// Key `key` of `obj` as a `T`, or `fallback` when absent or null (`read_key`).
template <class T>
T key_or(const nlohmann::json& obj, std::string_view key, T fallback) {
  read_key(obj, key, fallback);
  return fallback;
}

/// Key `key` of `obj` as a `T`; absent or null is an error ("missing (required)").
template <class T>
T required_key(const nlohmann::json& obj, std::string_view key) {
  T v{};
  if (!read_key(obj, key, v)) throw json_read_error("/" + pointer_token(key), "missing (required)");
  return v;
}

/// `read(value)` for the value at key `key` of `obj`, which must be there (not
/// null): for reading a nested object field by field, so that an error inside
/// it gets the key in front of its pointer. Returns what `read` returns.
template <class F>
decltype(auto) within(const nlohmann::json& obj, std::string_view key, F&& read) {
  if (!obj.is_object()) throw json_read_error({}, wrong_type_problem("an object", obj));
  const nlohmann::json* v = present(obj, key);
  if (v == nullptr) throw json_read_error("/" + pointer_token(key), "missing (required)");
  return nested_in(key, [&]() -> decltype(auto) { return std::forward<F>(read)(*v); });
}

/// Reads an enum written by name, `names[i]` naming enumerator i; `what`
/// names the enum in the error ("unknown dtype \"float32\"; expected one of
/// \"f32\", ..."). Throws `json_read_error`.
template <class Enum, std::size_t N>
void read_name(const nlohmann::json& j, Enum& out, const std::array<std::string_view, N>& names, std::string_view what) {
  const auto accepted = [&] { return fmt::format("one of \"{}\"", fmt::join(names, "\", \"")); };
  if (!j.is_string()) throw json_read_error({}, wrong_type_problem(accepted(), j));
  const auto& s = j.get_ref<const std::string&>();
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) {
      out = static_cast<Enum>(i);
      return;
    }
  throw json_read_error({}, fmt::format("unknown {} {}; expected {}", what, shown(j), accepted()));
}

}  // namespace detail
SPECGEN_END_NAMESPACE
