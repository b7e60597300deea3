// Credentials out of URLs and messages (see redact.hpp).
#include "redact.hpp"

#include "config.hpp"

#include <algorithm>
#include <array>
#include <cctype>

SPECGEN_BEGIN_NAMESPACE
namespace openai {

namespace {

constexpr std::string_view hidden = "***";

/// A query or fragment parameter whose value is a credential by its name:
/// api_key, key, access_token, token, secret, password, auth, sig, ...
bool secret_name(std::string_view name) {
  const std::string n = ascii_lowercase(name);
  for (std::string_view part : {"key", "token", "secret", "passw", "auth", "credential", "signature"})
    if (n.find(part) != std::string::npos) return true;
  return n == "sig" || n == "pwd" || n == "pass";
}

/// Where the authority (userinfo@host:port) of `url` starts and ends.
std::pair<std::size_t, std::size_t> authority_of(std::string_view url) {
  std::size_t start = 0;
  if (const std::size_t s = url.find("://"); s != std::string_view::npos) {
    const std::string_view scheme = url.substr(0, s);
    const bool is_scheme = !scheme.empty() && std::all_of(scheme.begin(), scheme.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
    });
    if (is_scheme) start = s + 3;
  }
  std::size_t end = url.find_first_of("/?#", start);
  if (end == std::string_view::npos) end = url.size();
  return {start, end};
}

/// Replaces the values of secret-looking parameters in `params` ("a=1&key=2").
std::string redact_params(std::string_view params) {
  std::string out;
  out.reserve(params.size());
  while (true) {
    const std::size_t amp = params.find_first_of("&;");
    const std::string_view p = params.substr(0, amp);
    const std::size_t eq = p.find('=');
    if (eq != std::string_view::npos && secret_name(p.substr(0, eq))) {
      out.append(p.substr(0, eq + 1));
      out.append(hidden);
    } else {
      out.append(p);
    }
    if (amp == std::string_view::npos) break;
    out.push_back(params[amp]);
    params.remove_prefix(amp + 1);
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decoded(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::string base64(std::string_view s) {
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const auto v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8) |
                   static_cast<unsigned char>(s[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out.push_back(alphabet[static_cast<std::size_t>((v >> k) & 63)]);
  }
  if (i < s.size()) {
    const bool two = i + 1 < s.size();
    const auto v = (static_cast<unsigned char>(s[i]) << 16) | (two ? static_cast<unsigned char>(s[i + 1]) << 8 : 0);
    out.push_back(alphabet[static_cast<std::size_t>((v >> 18) & 63)]);
    out.push_back(alphabet[static_cast<std::size_t>((v >> 12) & 63)]);
    out.push_back(two ? alphabet[static_cast<std::size_t>((v >> 6) & 63)] : '=');
    out.push_back('=');
  }
  return out;
}

void replace_all(std::string& s, std::string_view what, std::string_view with) {
  if (what.empty()) return;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size())) s.replace(at, what.size(), with);
}

/// `s` as valid UTF-8 without control characters: an invalid byte or a
/// control character other than newline and tab becomes U+FFFD.
std::string printable(std::string_view s) {
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7f) out.append(replacement);
      else out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    const std::size_t n = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = n != 0 && i + n <= s.size();
    std::uint32_t cp = n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (std::size_t k = 1; ok && k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8; C1 controls are not printable.
    ok = ok && !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
         !(cp >= 0xD800 && cp <= 0xDFFF) && !(cp >= 0x80 && cp <= 0x9F);
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(replacement);
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string redact_url(std::string_view url) {
  const auto [start, end] = authority_of(url);
  std::string out(url.substr(0, start));
  const std::string_view authority = url.substr(start, end - start);
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    out.append(hidden);
    out.append(authority.substr(at));
  } else {
    out.append(authority);
  }
  std::string_view rest = url.substr(end);
  const std::size_t q = rest.find_first_of("?#");
  out.append(rest.substr(0, q));
  if (q == std::string_view::npos) return out;
  rest.remove_prefix(q);
  // The query, then the fragment (where some sign-in flows put access_token=).
  while (!rest.empty()) {
    out.push_back(rest.front());
    rest.remove_prefix(1);
    const std::size_t next = rest.find('#');
    out.append(redact_params(rest.substr(0, next)));
    if (next == std::string_view::npos) break;
    rest.remove_prefix(next);
  }
  return out;
}

namespace detail {

bool has_control_char(std::string_view s) noexcept {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

scrubber::scrubber(std::string_view base_url, std::string_view api_key) {
  add_secret(api_key);
  add_url(base_url);
}

void scrubber::add_url(std::string_view base_url) {
  const auto [start, end] = authority_of(base_url);
  const std::string_view authority = base_url.substr(start, end - start);
  const std::size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return;
  const std::string_view userinfo = authority.substr(0, at);
  add_secret(userinfo);
  add_secret(percent_decoded(userinfo));
  const std::size_t colon = userinfo.find(':');
  // With a password the password is the secret; without one the user name is (a token as user name).
  const std::string_view user = userinfo.substr(0, colon);
  const std::string_view pass = colon == std::string_view::npos ? std::string_view{} : userinfo.substr(colon + 1);
  add_secret(pass);
  add_secret(percent_decoded(pass));
  // What libcurl sends for them: "Authorization: Basic base64(user:password)".
  add_secret(base64(percent_decoded(user) + ":" + percent_decoded(pass)));
}

void scrubber::add_secret(std::string_view secret) {
  if (secret.empty() || std::find(secrets_.begin(), secrets_.end(), secret) != secrets_.end()) return;
  secrets_.emplace_back(secret);
  // Longest first: a secret that contains another is replaced whole.
  std::stable_sort(secrets_.begin(), secrets_.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

std::string scrubber::clean(std::string_view text) const {
  std::string s(text);
  for (const auto& secret : secrets_) replace_all(s, secret, hidden);
  // Any URL in the text, also one the server wrote: its credentials go.
  std::string out;
  out.reserve(s.size());
  const std::string low = ascii_lowercase(s);
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t h = std::min(low.find("http://", i), low.find("https://", i));
    if (h == std::string::npos) break;
    std::size_t e = s.find_first_of(" \t\r\n\"'<>`", h);
    if (e == std::string::npos) e = s.size();
    out.append(s, i, h - i);
    out.append(redact_url(std::string_view(s).substr(h, e - h)));
    i = e;
  }
  out.append(s, i);
  return printable(out);
}

}  // namespace detail
}  // namespace openai
SPECGEN_END_NAMESPACE
