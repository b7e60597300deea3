#pragma once
// Keeping secrets out of what the backend says. Every message the backend
// emits (errors of create, stream errors, server_info's note) may end up in a
// journal, a terminal or a log, and parts of it come from the server: a
// server can echo the request's Authorization header, or a URL with a key in
// it, into its error body. `scrubber::clean` is applied to all of it.
#include <specgen/backend/openai.hpp>
#include <specgen/detail/config.hpp>

#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace openai::detail {

/// True if `s` holds a byte below 0x20 or DEL: such a value in an HTTP header
/// would end the header (CR, LF) or confuse the server.
[[nodiscard]] bool has_control_char(std::string_view s) noexcept;

/// Removes known secret values from text, redacts the credentials of any URL
/// in it, and makes it printable: valid UTF-8 without control characters
/// other than newline and tab.
class scrubber {
 public:
  scrubber() = default;
  /// `base_url`'s credentials (user, password, and their Basic-auth
  /// encoding) and `api_key` become secrets.
  scrubber(std::string_view base_url, std::string_view api_key);
  /// Adds one more value never to show.
  void add_secret(std::string_view secret);
  /// Adds the credentials of one more server's URL (as the constructor does for `base_url`).
  void add_url(std::string_view url);
  [[nodiscard]] std::string clean(std::string_view text) const;

 private:
  std::vector<std::string> secrets_;  ///< longest first
};

}  // namespace openai::detail
SPECGEN_END_NAMESPACE
