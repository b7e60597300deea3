#pragma once
// Server-sent events (the WHATWG "text/event-stream" format), parsed from
// bytes as they arrive. Reads may split anywhere: inside a line, inside a
// CRLF, inside a multi-byte UTF-8 character (the parser works on bytes and
// hands out whole events, so a character is never cut). Comment lines
// (": keep-alive") and fields other than `data` are skipped; an event is
// dispatched at its blank line, with its data lines joined by '\n'.
#include <specgen/detail/config.hpp>

#include <cstddef>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace openai::detail {

class sse_parser {
 public:
  /// Feeds `bytes`; calls `on_event(std::string_view data)` for each complete
  /// event that has data.
  template <class F>
  void feed(std::string_view bytes, F&& on_event) {
    if (!started_) {
      // A UTF-8 byte order mark may open the stream; it may itself be split.
      while (!bytes.empty() && bom_seen_ < bom.size() && bytes.front() == bom[bom_seen_]) {
        bytes.remove_prefix(1);
        ++bom_seen_;
      }
      if (bytes.empty() && bom_seen_ < bom.size()) return;
      if (bom_seen_ > 0 && bom_seen_ < bom.size()) line_.assign(bom.substr(0, bom_seen_));  // not a BOM after all
      started_ = true;
    }
    while (!bytes.empty()) {
      if (skip_lf_) {
        skip_lf_ = false;
        if (bytes.front() == '\n') {
          bytes.remove_prefix(1);
          continue;
        }
      }
      const std::size_t eol = bytes.find_first_of("\r\n");
      if (eol == std::string_view::npos) {
        line_.append(bytes);
        break;
      }
      skip_lf_ = bytes[eol] == '\r';  // a CR may be followed by the LF of a CRLF, possibly in the next read
      if (line_.empty()) {
        line(bytes.substr(0, eol), on_event);
      } else {
        line_.append(bytes.substr(0, eol));
        line(line_, on_event);
        line_.clear();
      }
      bytes.remove_prefix(eol + 1);
    }
  }

  /// The stream ended. A last event whose data lines were complete but whose
  /// blank line never came is still dispatched: a server that dropped the
  /// connection between the two must not lose a token.
  template <class F>
  void finish(F&& on_event) {
    if (has_data_) on_event(std::string_view(data_));
    reset();
  }

  /// Forget everything (a retried request starts a new stream).
  void reset() {
    line_.clear();
    data_.clear();
    has_data_ = false;
    skip_lf_ = false;
    started_ = false;
    bom_seen_ = 0;
  }

 private:
  static constexpr std::string_view bom = "\xEF\xBB\xBF";

  template <class F>
  void line(std::string_view l, F& on_event) {
    if (l.empty()) {
      if (has_data_) {
        on_event(std::string_view(data_));
        data_.clear();
        has_data_ = false;
      }
      return;
    }
    if (l.front() == ':') return;  // a comment: a keep-alive
    const std::size_t colon = l.find(':');
    const std::string_view field = l.substr(0, colon);
    if (field != "data") return;  // event, id, retry: nothing here uses them
    std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  }

  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool skip_lf_ = false;
  bool started_ = false;
  std::size_t bom_seen_ = 0;
};

}  // namespace openai::detail
SPECGEN_END_NAMESPACE
