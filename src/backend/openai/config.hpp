#pragma once
// What the configuration resolves to, for the backend's own use.
#include <specgen/backend/openai.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace openai {

/// The preset `c.preset` names (or `auto` picks from the model name), with
/// `c.family`'s overrides applied; errors name the bad field.
[[nodiscard]] expected<model_preset, error> resolve_family(const openai_config& c);

/// `s` with ASCII letters in lower case (model names, parameter names).
[[nodiscard]] std::string ascii_lowercase(std::string_view s);

/// The server root: trailing slashes and a trailing "/v1" removed.
[[nodiscard]] std::string normalized_base_url(std::string_view url);

}  // namespace openai
SPECGEN_END_NAMESPACE
