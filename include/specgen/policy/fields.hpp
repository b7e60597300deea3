#pragma once
/// Reading and writing policy parameter aggregates as JSON, with errors as values.
///
/// A params aggregate lists its fields once, in a static `fields` function, and
/// gets JSON writing, checked reading (wrong types, unknown keys, out-of-range
/// values all become `specgen::error` messages that name the policy and the
/// field) and validation from that single list:
///
/// @code
///   struct params {
///     int samples = 2;
///     std::vector<std::string> languages{"cuda"};
///     template <class Self, class F> static void fields(Self& s, F&& f) {
///       f("samples", s.samples, specgen::detail::in(1, specgen::limits::max_fork_samples));
///       f("languages", s.languages);
///     }
///     [[nodiscard]] std::string invalid() const { return languages.empty() ? "languages must not be empty" : ""; }
///     friend bool operator==(const params&, const params&) = default;
///   };
///   auto p = specgen::detail::read_fields<params>(nlohmann::json::parse(R"({"samples": 3})"), "fence_closed");
/// @endcode
///
/// A number read without a declared range must fit its type (and be finite);
/// declare a range for every number a user gives, so that a value no run can
/// use is refused where it is read (limits.hpp has the shared limits).
///
/// Used by the policy headers, modes.hpp and the generator's corpus_params.
/// Everything here is an implementation detail of those headers.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace detail {

/// An aggregate that lists its fields through `P::fields(p, f)`. Each field is
/// `f("key", p.member)`, or `f("key", p.member, range)` for a number that must
/// lie in a `range` (limits.hpp): a `duration` is written and read in seconds,
/// so its range is a `range<double>` of seconds.
template <class P>
concept has_fields = requires(P& p) { P::fields(p, [](const char*, auto&, auto&&...) {}); };

/// An enum written by name: `names_of(value)` (found by ADL) is its names,
/// indexed by the enum's values.
template <class T>
concept named_enum = std::is_enum_v<T> && requires(T t) {
  { names_of(t).size() } -> std::convertible_to<std::size_t>;
};

template <class T>
std::string field_problem(const T& v, const char* key);

/// The aggregate's own checks: the range of every field, then `invalid()`
/// (constraints between fields). "" when valid, else what is wrong.
template <class P>
std::string invalid_reason(const P& p) {
  std::string why;
  if constexpr (has_fields<P>)
    P::fields(p, [&](const char* key, const auto& v, const auto&... r) {
      if (!why.empty()) return;
      if constexpr (sizeof...(r) == 1) {
        if constexpr (std::same_as<std::remove_cvref_t<decltype(v)>, duration>) why = range_problem(to_seconds(v), r...);
        else why = range_problem(v, r...);
        if (!why.empty()) why = fmt::format("{} {}", key, why);
      } else {
        why = field_problem(v, key);
      }
    });
  if (!why.empty()) return why;
  if constexpr (requires { { p.invalid() } -> std::convertible_to<std::string>; }) return p.invalid();
  else return {};
}

/// The check of a field declared without a range: a nested aggregate's own
/// checks, and finiteness for a floating-point number.
template <class T>
std::string field_problem(const T& v, const char* key) {
  if constexpr (has_fields<T>) {
    auto why = invalid_reason(v);
    return why.empty() ? why : fmt::format("{}: {}", key, why);
  } else if constexpr (std::floating_point<T>) {
    return std::isfinite(v) ? std::string{} : fmt::format("{} must be a finite number, got {}", key, v);
  } else {
    return {};
  }
}

/// Constructors call this: invalid parameters in code are a programming error.
template <class P>
void require_valid(const P& p, std::string_view what) {
  if (auto why = invalid_reason(p); !why.empty())
    throw std::invalid_argument(fmt::format("{}: {}", what, why));
}

template <has_fields P>
nlohmann::json write_fields(const P& p);

template <class T>
nlohmann::json field_json(const T& v) {
  if constexpr (has_fields<T>) return write_fields(v);
  else if constexpr (std::same_as<T, duration>) return to_seconds(v);
  else if constexpr (named_enum<T>) return std::string(names_of(v)[static_cast<std::size_t>(v)]);
  else return nlohmann::json(v);
}

template <has_fields P>
nlohmann::json write_fields(const P& p) {
  nlohmann::json j = nlohmann::json::object();
  P::fields(p, [&](const char* key, const auto& v, const auto&...) { j[key] = field_json(v); });
  return j;
}

/// Reads `j` over `p` (see below); `pointer` is where `j` sits in its document
/// ("" for the whole document, "/pool/elastic" inside an engine config), so
/// that every error's `where` is the JSON pointer of the value at fault.
template <has_fields P>
expected<P, error> read_fields(const nlohmann::json& j, std::string_view pointer, P p = P{});

/// The error "must be <what is accepted>, got <the value>" at `pointer`.
inline error must_be(std::string_view pointer, std::string_view want, const nlohmann::json& got) {
  return json_error("", pointer, fmt::format("must be {}, got {}", want, shown(got)));
}

/// Reads one field value at `pointer`, checking it against `r` when the field
/// declares a range.
template <class T, class... R>
expected<void, error> read_value(const nlohmann::json& j, T& out, std::string_view pointer, const R&... r) {
  static_assert(sizeof...(R) <= 1);
  if constexpr (has_fields<T>) {
    return read_fields<T>(j, pointer, out).transform([&](T v) { out = std::move(v); });
  } else if constexpr (std::same_as<T, bool>) {
    if (!j.is_boolean()) return unexpected(must_be(pointer, "true or false", j));
    out = j.get<bool>();
    return {};
  } else if constexpr (std::same_as<T, duration>) {
    const range<double> checked = [&] {  // the declared range, else [0, max_seconds]
      if constexpr (sizeof...(R) == 1) return range<double>(r...);
      else return limits::seconds;
    }();
    double s = 0;
    if (!number_value(j, s) || !checked.contains(s)) return unexpected(must_be(pointer, checked.describe() + " (seconds)", j));
    out = seconds(s);
    return {};
  } else if constexpr (std::is_arithmetic_v<T>) {
    const range<T> checked = [&] {
      if constexpr (sizeof...(R) == 1) return range<T>(r...);
      else return any_value<T>();
    }();
    T value{};
    if (!number_value(j, value) || !checked.contains(value)) return unexpected(must_be(pointer, checked.describe(), j));
    out = value;
    return {};
  } else if constexpr (named_enum<T>) {
    const auto& names = names_of(out);
    if (j.is_string())
      for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == j.get_ref<const std::string&>()) {
          out = static_cast<T>(i);
          return {};
        }
    return unexpected(must_be(pointer, fmt::format("one of \"{}\"", fmt::join(names, "\", \"")), j));
  } else if constexpr (std::same_as<T, std::string>) {
    if (!j.is_string()) return unexpected(must_be(pointer, "a string", j));
    out = j.get<std::string>();
    return {};
  } else if constexpr (std::same_as<T, std::vector<std::string>>) {
    if (!j.is_array()) return unexpected(must_be(pointer, "an array of strings", j));
    std::vector<std::string> v;
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_string()) return unexpected(must_be(fmt::format("{}/{}", pointer, i), "a string", j[i]));
      v.push_back(j[i].get<std::string>());
    }
    out = std::move(v);
    return {};
  } else if constexpr (std::same_as<T, nlohmann::json>) {
    if (!j.is_object()) return unexpected(must_be(pointer, "an object", j));
    out = j;
    return {};
  } else {
    static_assert(sizeof(T) == 0, "read_value: add support for this field type");
  }
}

/// Reads `j` over a copy of `p` (absent keys keep their values), rejecting
/// unknown keys and values outside their fields' ranges, then checks `p`
/// (`invalid_reason`, reported at the object). `null` means "all defaults".
template <has_fields P>
expected<P, error> read_fields(const nlohmann::json& j, std::string_view pointer, P p) {
  if (j.is_null()) return p;
  if (!j.is_object()) return unexpected(must_be(pointer, "an object of parameters", j));
  std::vector<std::string_view> known;
  std::optional<error> failed;
  P::fields(p, [&](const char* key, auto& v, const auto&... r) {
    known.emplace_back(key);
    if (failed) return;
    if (auto it = j.find(key); it != j.end())
      if (auto got = read_value(*it, v, fmt::format("{}/{}", pointer, pointer_token(key)), r...); !got)
        failed = got.error();
  });
  if (failed) return unexpected(std::move(*failed));
  for (const auto& [key, value] : j.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      return unexpected(json_error("", fmt::format("{}/{}", pointer, pointer_token(key)), unknown_key_problem(key, known)));
  if (auto why = invalid_reason(p); !why.empty()) return unexpected(json_error("", pointer, why));
  return p;
}

/// A policy config is `"name"` or `{"name": {params}}` (plus, for triggers,
/// an optional sibling `"gate"`). Splits it into the name and the params body.
struct policy_config {
  std::string kind;
  /// The params, inside the config (no copy: a config may be large or deep);
  /// a null JSON value when the config was a bare name.
  const nlohmann::json* body = &null_json();

  static const nlohmann::json& null_json() {
    static const nlohmann::json null;
    return null;
  }
};

/// Splits the config at `pointer` of a `family` ("pool") whose kinds are `known`.
inline expected<policy_config, error> split_config(const nlohmann::json& j, std::string_view pointer,
                                                   std::string_view family, std::span<const std::string_view> known,
                                                   std::span<const std::string_view> extra_keys = {}) {
  if (j.is_string()) return policy_config{j.get<std::string>(), &policy_config::null_json()};
  if (j.is_object()) {
    policy_config out;
    for (const auto& [key, value] : j.items()) {
      if (std::find(extra_keys.begin(), extra_keys.end(), key) != extra_keys.end()) continue;
      if (!out.kind.empty())
        return unexpected(json_error("", fmt::format("{}/{}", pointer, pointer_token(key)),
                                     fmt::format("a config names one {} kind, got both '{}' and '{}' (known: {})", family,
                                                 out.kind, key, fmt::join(known, ", "))));
      out.kind = key;
      out.body = &value;
    }
    if (!out.kind.empty()) return out;
  }
  return unexpected(json_error("", pointer,
                               fmt::format("expected a {} kind's name or an object {{\"<kind>\": {{...}}}}, with a kind "
                                           "from: {}; got {}",
                                           family, fmt::join(known, ", "), shown(j))));
}

/// Refuses the `levels`-th nested `any_of` of a config (at `pointer`) when
/// that is more than limits::max_policy_depth. Building one recurses once per
/// level, and so would copying, running and destroying the policy; a config
/// nested 100,000 deep would overflow the stack.
inline expected<void, error> check_policy_depth(int levels, std::string_view pointer) {
  if (levels <= limits::max_policy_depth) return {};
  return unexpected(json_error("", pointer,
                               fmt::format("any_of is nested more than {} levels deep; flatten the nested any_of lists "
                                           "into one (any_of of any_of is the same as one any_of of all the members)",
                                           limits::max_policy_depth)));
}

}  // namespace detail

SPECGEN_END_NAMESPACE
