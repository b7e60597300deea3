#pragma once
/// The stable text names of the core's enums, as they appear in journals,
/// results files and command lines.
///
/// Each enum has `to_string(e)` and `parse_<enum>(name) -> std::optional<enum>`.
/// verdict_kind and stage's names are in types.hpp, dtype and distribution's
/// in task.hpp; this header adds origin and finish_reason, `parse_stage`, and
/// the helpers an error message needs. It needs no JSON library, so a
/// command-line parser can use it too.
///
/// @code
///   auto o = specgen::parse_origin("fork");       // origin::fork
///   if (!o) fail(fmt::format("expected one of {}", specgen::detail::name_list(specgen::origin_names)));
///   std::string_view n = specgen::to_string(specgen::finish_reason::length);  // "length"
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE

namespace detail {

/// The enum whose names sit at `names[i]` for enumerator value i.
template <class Enum, std::size_t N>
constexpr std::optional<Enum> parse_name(const std::array<std::string_view, N>& names,
                                         std::string_view s) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<Enum>(i);
  return std::nullopt;
}

/// `"a", "b", "c"`: for error messages that tell the user what is accepted.
template <std::size_t N>
std::string name_list(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i != 0) out += ", ";
    out += '"';
    out += names[i];
    out += '"';
  }
  return out;
}

}  // namespace detail

// dtype and distribution names (dtype_names, parse_dtype, ...) live in task.hpp.

inline constexpr std::array<std::string_view, 2> origin_names{"main", "fork"};
constexpr std::string_view to_string(origin o) noexcept { return origin_names[static_cast<std::size_t>(o)]; }
constexpr std::optional<origin> parse_origin(std::string_view s) noexcept {
  return detail::parse_name<origin>(origin_names, s);
}

// to_string(stage) and stage_names live in types.hpp.
constexpr std::optional<stage> parse_stage(std::string_view s) noexcept {
  return detail::parse_name<stage>(stage_names, s);
}

inline constexpr std::array<std::string_view, 4> finish_reason_names{"stop", "length", "cancelled", "error"};
constexpr std::string_view to_string(finish_reason r) noexcept {
  return finish_reason_names[static_cast<std::size_t>(r)];
}
constexpr std::optional<finish_reason> parse_finish_reason(std::string_view s) noexcept {
  return detail::parse_name<finish_reason>(finish_reason_names, s);
}

SPECGEN_END_NAMESPACE
