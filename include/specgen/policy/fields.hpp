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
///       f("samples", s.samples);
///       f("languages", s.languages);
///     }
///     [[nodiscard]] std::string invalid() const { return samples < 1 ? "samples must be >= 1" : ""; }
///     friend bool operator==(const params&, const params&) = default;
///   };
///   auto p = specgen::detail::read_fields<params>(j, "fence_closed");  // expected<params, error>
/// @endcode
///
/// Used by trigger.hpp, termination.hpp and kv.hpp. Everything here is an
/// implementation detail of those headers.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace detail {

/// An aggregate that lists its fields through `P::fields(p, f)`.
template <class P>
concept has_fields = requires(P& p) { P::fields(p, [](const char*, auto&) {}); };

/// The aggregate's own range checks: "" when valid, else what is wrong.
template <class P>
std::string invalid_reason(const P& p) {
  if constexpr (requires { { p.invalid() } -> std::convertible_to<std::string>; }) return p.invalid();
  else return {};
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
  else return nlohmann::json(v);
}

template <has_fields P>
nlohmann::json write_fields(const P& p) {
  nlohmann::json j = nlohmann::json::object();
  P::fields(p, [&](const char* key, const auto& v) { j[key] = field_json(v); });
  return j;
}

template <has_fields P>
expected<P, error> read_fields(const nlohmann::json& j, const std::string& what, P p = P{});

/// Reads one field value; returns "" or the problem (without the field's name).
template <class T>
std::string read_value(const nlohmann::json& j, T& out, const std::string& where) {
  if constexpr (has_fields<T>) {
    auto r = read_fields<T>(j, where, out);
    if (!r) return r.error().message;
    out = std::move(*r);
    return {};
  } else if constexpr (std::same_as<T, bool>) {
    if (!j.is_boolean()) return fmt::format("{}: must be true or false, got {}", where, j.dump());
    out = j.get<bool>();
    return {};
  } else if constexpr (std::integral<T>) {
    const bool fits = j.is_number_unsigned()  ? j.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<T>::max())
                      : j.is_number_integer() ? (std::is_signed_v<T> && j.get<std::int64_t>() >= std::int64_t(std::numeric_limits<T>::min()) &&
                                                 j.get<std::int64_t>() <= std::int64_t(std::numeric_limits<T>::max()))
                                              : false;
    if (!fits)
      return fmt::format("{}: must be an integer in [{}, {}], got {}", where, std::numeric_limits<T>::min(),
                         std::numeric_limits<T>::max(), j.dump());
    out = j.get<T>();
    return {};
  } else if constexpr (std::floating_point<T>) {
    if (!j.is_number()) return fmt::format("{}: must be a number, got {}", where, j.dump());
    out = j.get<T>();
    return {};
  } else if constexpr (std::same_as<T, std::string>) {
    if (!j.is_string()) return fmt::format("{}: must be a string, got {}", where, j.dump());
    out = j.get<std::string>();
    return {};
  } else if constexpr (std::same_as<T, std::vector<std::string>>) {
    if (!j.is_array()) return fmt::format("{}: must be an array of strings, got {}", where, j.dump());
    std::vector<std::string> v;
    for (const auto& e : j) {
      if (!e.is_string()) return fmt::format("{}: must be an array of strings, got element {}", where, e.dump());
      v.push_back(e.get<std::string>());
    }
    out = std::move(v);
    return {};
  } else if constexpr (std::same_as<T, nlohmann::json>) {
    if (!j.is_object()) return fmt::format("{}: must be an object, got {}", where, j.dump());
    out = j;
    return {};
  } else {
    static_assert(sizeof(T) == 0, "read_value: add support for this field type");
  }
}

/// Reads `j` over a copy of `p` (absent keys keep their values), rejecting
/// unknown keys, then checks `p.invalid()`. `null` means "all defaults".
template <has_fields P>
expected<P, error> read_fields(const nlohmann::json& j, const std::string& what, P p) {
  if (j.is_null()) return p;
  if (!j.is_object())
    return unexpected(error{fmt::format("{}: parameters must be an object, got {}", what, j.dump())});
  std::vector<std::string> known;
  std::string problem;
  P::fields(p, [&](const char* key, auto& v) {
    known.emplace_back(key);
    if (!problem.empty()) return;
    if (auto it = j.find(key); it != j.end()) problem = read_value(*it, v, fmt::format("{}.{}", what, key));
  });
  if (!problem.empty()) return unexpected(error{problem});
  for (const auto& [key, value] : j.items()) {
    bool found = false;
    for (const auto& k : known) found = found || k == key;
    if (!found)
      return unexpected(error{fmt::format("{}: unknown parameter '{}' (known: {})", what, key, fmt::join(known, ", "))});
  }
  if (auto why = invalid_reason(p); !why.empty()) return unexpected(error{fmt::format("{}: {}", what, why)});
  return p;
}

/// A policy config is `"name"` or `{"name": {params}}` (plus, for triggers,
/// an optional sibling `"gate"`). Splits it into the name and the params body.
struct policy_config {
  std::string kind;
  nlohmann::json body;  ///< null when the config was a bare name
};

inline expected<policy_config, error> split_config(const nlohmann::json& j, std::string_view what,
                                                   std::string_view known,
                                                   std::initializer_list<std::string_view> extra_keys = {}) {
  if (j.is_string()) return policy_config{j.get<std::string>(), nullptr};
  if (j.is_object()) {
    policy_config out;
    for (const auto& [key, value] : j.items()) {
      bool extra = false;
      for (auto e : extra_keys) extra = extra || key == e;
      if (extra) continue;
      if (!out.kind.empty())
        return unexpected(error{fmt::format("{}: a config names one {} kind, got both '{}' and '{}' (known: {})", what,
                                            what, out.kind, key, known)});
      out.kind = key;
      out.body = value;
    }
    if (!out.kind.empty()) return out;
  }
  return unexpected(error{fmt::format("{}: expected a name or an object {{\"<kind>\": {{...}}}} with a kind from: {}; got {}",
                                      what, known, j.dump())});
}

}  // namespace detail

SPECGEN_END_NAMESPACE
