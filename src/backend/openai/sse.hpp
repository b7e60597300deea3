#pragma once
// Server-sent events (the WHATWG "text/event-stream" format), parsed from
// bytes as they arrive. Reads may split anywhere: inside a line, inside a
// CRLF, inside a multi-byte UTF-8 character (the parser works on bytes and
// hands out whole events, so a character is never cut). Comment lines
// (": keep-alive") and fields other than `data` are skipped; an event is
// dispatched at its blank line, with its data lines joined by '\n'.
//
// What the parser holds is bounded: a line longer than `max_bytes`, or an
// event whose data grows past it, stops the parser (`feed` returns false and
// `overflowed()` says so) instead of buffering without end.
#include <specgen/detail/config.hpp>

#include <cstddef>
#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace openai::detail {

class sse_parser {
 public:
  explicit sse_parser(std::size_t max_bytes = std::size_t{8} << 20) : max_(max_bytes) {}

  /// The longest line, and the most data an event may carry.
  void set_limit(std::size_t max_bytes) noexcept { max_ = max_bytes; }
  [[nodiscard]] std::size_t limit() const noexcept { return max_; }
  /// A line or an event was longer than the limit: nothing more is parsed until `reset`.
  [[nodiscard]] bool overflowed() const noexcept { return overflowed_; }

  /// Feeds `bytes`; calls `on_event(std::string_view data)` for each complete
  /// event that has data. False once the limit was exceeded (the events
  /// before that point were dispatched).
  template <class F>
  [[nodiscard]] bool feed(std::string_view bytes, F&& on_event) {
    if (overflowed_) return false;
    if (!started_) {
      // A UTF-8 byte order mark may open the stream; it may itself be split.
      while (!bytes.empty() && bom_seen_ < bom.size() && bytes.front() == bom[bom_seen_]) {
        bytes.remove_prefix(1);
        ++bom_seen_;
      }
      if (bytes.empty() && bom_seen_ < bom.size()) return true;
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
        if (line_.size() + bytes.size() > max_) return overflow();
        line_.append(bytes);
        break;
      }
      if (line_.size() + eol > max_) return overflow();
      skip_lf_ = bytes[eol] == '\r';  // a CR may be followed by the LF of a CRLF, possibly in the next read
      bool ok = true;
      if (line_.empty()) {
        ok = line(bytes.substr(0, eol), on_event);
      } else {
        line_.append(bytes.substr(0, eol));
        ok = line(line_, on_event);
        line_.clear();
      }
      if (!ok) return overflow();
      bytes.remove_prefix(eol + 1);
    }
    return true;
  }

  /// The stream ended. A last event whose data lines were complete but whose
  /// blank line never came is still dispatched: a server that dropped the
  /// connection between the two must not lose a token.
  template <class F>
  void finish(F&& on_event) {
    if (has_data_ && !overflowed_) on_event(std::string_view(data_));
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
    overflowed_ = false;
  }

 private:
  static constexpr std::string_view bom = "\xEF\xBB\xBF";

  /// False when the event's data would grow past the limit.
  template <class F>
  bool line(std::string_view l, F& on_event) {
    if (l.empty()) {
      if (has_data_) {
        on_event(std::string_view(data_));
        data_.clear();
        has_data_ = false;
      }
      return true;
    }
    if (l.front() == ':') return true;  // a comment: a keep-alive
    const std::size_t colon = l.find(':');
    const std::string_view field = l.substr(0, colon);
    if (field != "data") return true;  // event, id, retry: nothing here uses them
    std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (data_.size() + (has_data_ ? 1 : 0) + value.size() > max_) return false;
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
    return true;
  }

  bool overflow() {
    overflowed_ = true;
    // Give the memory back: the stream ends here.
    std::string().swap(line_);
    std::string().swap(data_);
    has_data_ = false;
    return false;
  }

  std::size_t max_;
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool skip_lf_ = false;
  bool started_ = false;
  bool overflowed_ = false;
  std::size_t bom_seen_ = 0;
};

}  // namespace openai::detail
SPECGEN_END_NAMESPACE
