#pragma once
/// Kernel extraction: finding a candidate (device source plus launch plan) in
/// a model's text, and the incremental scanners that trigger policies reuse.
///
/// A model answers in Markdown. The candidate is a fenced source block tagged
/// `cuda`, `cu`, `cpp`, `c++`, `cuh` or `c` that defines at least one
/// `extern "C" __global__` kernel, paired with a fenced `plan` block; the last
/// complete pair in the text wins. The rules, the pairing and every failure
/// reason are described in docs/extraction.md.
///
/// @code
///   auto c = specgen::extract_candidate(answer);
///   if (!c) return feedback_for_model(c.error().message);  // e.g. "... no ```plan block ..."
///   submit(c->source, c->plan);                            // c->kernels == {"softmax"}
/// @endcode
///
/// Everything here is a hand-written byte scanner: linear time on any input
/// (no regular expressions, no backtracking), safe on NUL bytes, CRLF line
/// ends, megabyte-long lines and unterminated constructs.
#include <specgen/detail/config.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// A half-open byte range `[begin, end)` of some text.
struct text_span {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] constexpr std::size_t size() const noexcept { return end - begin; }
  /// The bytes of `text` this span covers (`text` must be the text it was reported for).
  [[nodiscard]] constexpr std::string_view of(std::string_view text) const { return text.substr(begin, end - begin); }
  friend bool operator==(const text_span&, const text_span&) = default;
};

// ---- fence_scanner ---------------------------------------------------------------

/// A fenced block that has closed.
struct fenced_block {
  /// First word of the info string, ASCII lower-cased, "" when unlabelled.
  /// At most `fence_scanner::max_tag` bytes (a longer word is cut, so it never
  /// equals a real language tag).
  std::string tag;
  char fence = '`';   ///< the fence character, '`' or '~'
  text_span block;    ///< opening fence line start .. end of the closing fence line (its newline included)
  text_span content;  ///< the lines between the fences, each with its line end
  friend bool operator==(const fenced_block&, const fenced_block&) = default;
};

/**
 * Finds Markdown fenced blocks in text that arrives in chunks.
 *
 * A fence is a line of three or more backticks or tildes, after any indentation
 * of spaces or tabs; for a backtick fence the rest of the opening line may not
 * contain a backtick (so inline code like ```` ```x``` ```` in prose is not a
 * fence). A block closes at a line holding only a run of the same character at
 * least as long as the opening run (and whitespace). Everything else between
 * the fences is content, whatever the language: fence recognition is by line,
 * as a Markdown renderer shows it, so a ``` inside a string literal or a
 * comment closes nothing unless it starts a line of its own.
 *
 * Chunks may split anywhere, even inside a fence marker or a CRLF: the
 * reported blocks are the same for every chunking of the same text. A block
 * is reported when the newline ending its closing line arrives, or at
 * `finish()` when the text ends on the closing line.
 *
 * @code
 *   specgen::fence_scanner fs;
 *   for (auto chunk : stream)
 *     for (const auto& b : fs.feed(chunk))
 *       if (b.tag == "cuda") on_code_block(b);
 *   fs.finish();
 *   bool cut_off = fs.inside_fence();
 * @endcode
 */
class fence_scanner {
 public:
  static constexpr std::size_t max_tag = 32;

  /// Scans `chunk`, the text following everything fed so far. Returns the blocks that closed in it.
  std::vector<fenced_block> feed(std::string_view chunk) {
    if (finished_) throw std::logic_error("fence_scanner::feed after finish()");
    std::vector<fenced_block> out;
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      if (state_ == line_state::rest) {  // nothing on this line matters: jump to its end
        const std::size_t eol = std::min(chunk.find('\n', i), chunk.size());
        offset_ += eol - i;
        i = eol;
        if (i == chunk.size()) break;
      }
      step(chunk[i], out);
      ++offset_;
    }
    return out;
  }

  /// Ends the text: a closing fence on an unterminated last line closes its block.
  /// Afterwards `inside_fence()` says whether the text ended inside an unterminated block.
  std::vector<fenced_block> finish() {
    std::vector<fenced_block> out;
    if (!finished_) end_line(offset_, out);
    finished_ = true;
    return out;
  }

  /// True between an opening fence line (once its newline has arrived) and the
  /// newline of its closing line.
  [[nodiscard]] bool inside_fence() const noexcept { return open_; }
  /// The tag of the open block ("" when outside a fence or unlabelled).
  [[nodiscard]] std::string_view open_tag() const noexcept { return open_ ? std::string_view(open_tag_) : ""; }
  /// Where the open block's opening fence line starts.
  [[nodiscard]] std::size_t open_at() const noexcept { return open_begin_; }
  /// Bytes fed so far.
  [[nodiscard]] std::size_t offset() const noexcept { return offset_; }

 private:
  // Where the scanner is within the current line.
  enum class line_state : std::uint8_t {
    indent,   // only spaces/tabs so far
    run,      // inside a run of a fence character
    info,     // after an opening run: the info string
    closing,  // after a possible closing run: only whitespace may follow
    rest,     // this line can no longer be a fence
  };

  static constexpr bool blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r'; }

  void step(char c, std::vector<fenced_block>& out) {
    if (c == '\n') {
      end_line(offset_ + 1, out);
      return;
    }
    switch (state_) {
      case line_state::indent:
        if (blank(c)) return;
        if ((c == '`' || c == '~') && (!open_ || c == open_char_)) {
          state_ = line_state::run;
          run_char_ = c;
          run_len_ = 1;
        } else {
          state_ = line_state::rest;
        }
        return;
      case line_state::run:
        if (c == run_char_) {
          ++run_len_;
          return;
        }
        state_ = run_is_fence() ? (open_ ? line_state::closing : line_state::info) : line_state::rest;
        if (state_ == line_state::info) start_info();
        step(c, out);  // the byte after the run belongs to the new state
        return;
      case line_state::info:
        info_byte(c);
        return;
      case line_state::closing:
        if (!blank(c)) state_ = line_state::rest;
        return;
      case line_state::rest:
        return;
    }
  }

  [[nodiscard]] bool run_is_fence() const noexcept { return run_len_ >= (open_ ? open_len_ : 3); }

  void start_info() {
    tag_.clear();
    tag_state_ = 0;
  }

  // The info string's first word is the tag; a backtick anywhere in a
  // backtick fence's info string makes the line inline code, not a fence.
  void info_byte(char c) {
    if (run_char_ == '`' && c == '`') {
      state_ = line_state::rest;
      return;
    }
    if (tag_state_ == 2) return;
    if (blank(c)) {
      if (tag_state_ == 1) tag_state_ = 2;
      return;
    }
    tag_state_ = 1;
    if (tag_.size() < max_tag) tag_.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }

  // A line ends at `next` (one past its newline, or the end of the text).
  void end_line(std::size_t next, std::vector<fenced_block>& out) {
    if (state_ == line_state::run && run_is_fence()) {
      state_ = open_ ? line_state::closing : line_state::info;
      if (state_ == line_state::info) start_info();
    }
    if (state_ == line_state::info) {
      open_ = true;
      open_char_ = run_char_;
      open_len_ = run_len_;
      open_begin_ = line_begin_;
      content_begin_ = next;
      open_tag_.swap(tag_);
    } else if (state_ == line_state::closing) {
      out.push_back(fenced_block{.tag = std::move(open_tag_),
                                 .fence = open_char_,
                                 .block = {open_begin_, next},
                                 .content = {content_begin_, line_begin_}});
      open_tag_.clear();
      open_ = false;
    }
    state_ = line_state::indent;
    line_begin_ = next;
  }

  std::size_t offset_ = 0;
  std::size_t line_begin_ = 0;
  line_state state_ = line_state::indent;
  char run_char_ = '`';
  std::size_t run_len_ = 0;
  std::string tag_;           // tag of the line being read
  std::uint8_t tag_state_ = 0;  // 0 before the tag, 1 in it, 2 after it
  bool open_ = false;
  char open_char_ = '`';
  std::size_t open_len_ = 0;
  std::size_t open_begin_ = 0;
  std::size_t content_begin_ = 0;
  std::string open_tag_;
  bool finished_ = false;
};

// ---- brace_tracker -----------------------------------------------------------------

namespace detail {

/// What a byte of C/C++/CUDA source is, for scanners that must skip comments and literals.
enum class lex_class : std::uint8_t {
  code,         ///< ordinary code (whitespace included)
  comment,      ///< inside // or /* */ (the opening '/' itself reads as code)
  literal,      ///< inside a string or character literal, quotes included
  literal_end,  ///< the byte that ends a literal (its closing quote, or the newline that cuts it)
};

/// A byte-at-a-time lexer for comments and literals: "..." with escapes,
/// '...', raw strings R"d(...)d" (also with L, u, U, u8 prefixes) and digit
/// separators (1'000). An unterminated string literal ends at its line end, so
/// a stray quote damages one line, not the rest of the text; an apostrophe not
/// closed within a character literal's length is taken for prose.
class c_lexer {
 public:
  lex_class step(char c) noexcept {
    switch (s_) {
      case state::code: return code(c);
      case state::slash:
        if (c == '/') { s_ = state::line_comment; return lex_class::comment; }
        if (c == '*') { s_ = state::block_comment; return lex_class::comment; }
        s_ = state::code;
        return code(c);
      case state::line_comment:
        if (c == '\n') { s_ = state::code; return lex_class::code; }
        return lex_class::comment;
      case state::block_comment:
        if (c == '*') s_ = state::block_star;
        return lex_class::comment;
      case state::block_star:
        if (c == '/') s_ = state::code;
        else if (c != '*') s_ = state::block_comment;
        return lex_class::comment;
      case state::string:
        if (c == '\\') { s_ = state::string_escape; return lex_class::literal; }
        if (c == '"' || c == '\n') { s_ = state::code; return lex_class::literal_end; }
        return lex_class::literal;
      case state::string_escape: s_ = state::string; return lex_class::literal;
      case state::chr:
        if (c == '\'' || c == '\n') { s_ = state::code; return lex_class::literal_end; }
        if (chr_len_ == 0) {
          // A character literal is short: one byte, one UTF-8 character, or an escape
          // ('\x41', '\U0001F600'). Anything longer is an apostrophe in prose
          // ("Let's"), which must not hide the code after it.
          chr_limit_ = c == '\\' ? 10 : static_cast<unsigned char>(c) >= 0x80 ? 4 : 1;
        } else if (chr_len_ >= chr_limit_) {
          s_ = state::code;
          return code(c);
        }
        ++chr_len_;
        if (c == '\\') s_ = state::chr_escape;
        return lex_class::literal;
      case state::chr_escape: s_ = state::chr; ++chr_len_; return lex_class::literal;
      case state::raw_delim:
        if (c == '(') { s_ = state::raw_body; return lex_class::literal; }
        if (c == ' ' || c == ')' || c == '\\' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
            delim_len_ == delim_.size()) {
          s_ = state::string;  // not a valid raw string: read it as an ordinary one
          return step(c);
        }
        delim_[delim_len_++] = c;
        return lex_class::literal;
      case state::raw_body:
        if (c == ')') { s_ = state::raw_close; match_ = 0; }
        return lex_class::literal;
      case state::raw_close:
        // ')' cannot occur in a delimiter, so a mismatch restarts only at ')'.
        if (match_ < delim_len_ && c == delim_[match_]) { ++match_; return lex_class::literal; }
        if (match_ == delim_len_ && c == '"') { s_ = state::code; return lex_class::literal_end; }
        if (c == ')') match_ = 0;
        else s_ = state::raw_body;
        return lex_class::literal;
    }
    return lex_class::code;
  }

  [[nodiscard]] static constexpr bool ident_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }

 private:
  enum class state : std::uint8_t {
    code, slash, line_comment, block_comment, block_star,
    string, string_escape, chr, chr_escape, raw_delim, raw_body, raw_close,
  };

  lex_class code(char c) noexcept {
    if (ident_char(c)) {
      if (ident_len_ == 0) numeric_ = c >= '0' && c <= '9';
      if (ident_len_ < prefix_.size()) prefix_[ident_len_] = c;
      if (ident_len_ < 255) ++ident_len_;
      return lex_class::code;
    }
    if (c == '\'' && ident_len_ > 0 && numeric_) return lex_class::code;  // 1'000'000
    const bool raw = c == '"' && raw_prefix();
    ident_len_ = 0;
    switch (c) {
      case '/': s_ = state::slash; return lex_class::code;
      case '"':
        s_ = raw ? state::raw_delim : state::string;
        delim_len_ = 0;
        return lex_class::literal;
      case '\'':
        s_ = state::chr;
        chr_len_ = 0;
        return lex_class::literal;
      default: return lex_class::code;
    }
  }

  [[nodiscard]] bool raw_prefix() const noexcept {
    if (ident_len_ == 0 || ident_len_ > 3 || prefix_[ident_len_ - 1] != 'R') return false;
    const std::string_view p(prefix_.data(), ident_len_ - 1u);
    return p.empty() || p == "L" || p == "u" || p == "U" || p == "u8";
  }

  state s_ = state::code;
  std::uint8_t ident_len_ = 0;  // length of the identifier or number being read (saturating)
  bool numeric_ = false;        // it started with a digit
  std::array<char, 3> prefix_{};
  std::array<char, 16> delim_{};  // a raw string's delimiter (at most 16 characters by the standard)
  std::size_t delim_len_ = 0;
  std::size_t match_ = 0;
  std::uint8_t chr_len_ = 0;    // bytes inside a character literal so far
  std::uint8_t chr_limit_ = 1;  // how many it may hold
};

}  // namespace detail

/// What `brace_tracker` reports about a `__global__` function.
enum class kernel_event_kind : std::uint8_t {
  declared,   ///< its name and '(' have been seen
  completed,  ///< its body's closing brace has been seen
};

struct kernel_event {
  kernel_event_kind kind = kernel_event_kind::declared;
  std::string name;       ///< the function's name (at most `brace_tracker::max_name` bytes)
  bool extern_c = false;  ///< declared `extern "C" __global__ ...` or inside an `extern "C" { }` block
  /// From `extern` (for `extern "C" __global__`) or `__global__` to one past
  /// the '(' after the name (declared) or one past the body's '}' (completed).
  text_span span;
  friend bool operator==(const kernel_event&, const kernel_event&) = default;
};

/**
 * Follows C/CUDA text chunk by chunk and reports when a `__global__`
 * function is declared and when its body is complete (brace depth back to
 * zero). Braces, parentheses and keywords inside comments, string, character
 * and raw-string literals are ignored. Chunks may split anywhere: the events
 * are the same for every chunking.
 *
 * Understands `extern "C" __global__ [__launch_bounds__(...)] void name(...) {...}`,
 * `extern "C" { ... }` blocks, and prototypes (`...);`, which complete nothing).
 * It is a light parse, not a compiler: macros are not expanded.
 *
 * @code
 *   specgen::brace_tracker bt;
 *   for (auto chunk : stream)
 *     for (const auto& e : bt.feed(chunk))
 *       if (e.kind == specgen::kernel_event_kind::completed) on_function_complete(e.name);
 * @endcode
 */
class brace_tracker {
 public:
  static constexpr std::size_t max_name = 256;

  /// Scans `chunk`, the text following everything fed so far; returns the events it caused, in order.
  std::vector<kernel_event> feed(std::string_view chunk) {
    std::vector<kernel_event> out;
    for (char c : chunk) {
      step(c, out);
      ++offset_;
    }
    return out;
  }

  /// True from a `__global__` keyword until its body closes (or it turns out to be a prototype).
  [[nodiscard]] bool inside_kernel() const noexcept {
    return phase_ != phase::idle && phase_ != phase::saw_extern && phase_ != phase::saw_extern_c;
  }
  /// True when nothing is pending: no identifier being read, no kernel, no `extern "C"` prefix or block open.
  [[nodiscard]] bool idle() const noexcept { return phase_ == phase::idle && !in_ident_ && extern_block_ == 0; }
  /// Bytes fed so far.
  [[nodiscard]] std::size_t offset() const noexcept { return offset_; }

 private:
  enum class phase : std::uint8_t {
    idle,
    saw_extern,     // `extern`
    saw_extern_c,   // `extern "C"`
    signature,      // after `__global__`, before the name's '('
    launch_bounds,  // inside `__launch_bounds__( ... )`
    params,         // inside the parameter list
    after_params,   // after ')': '{' starts the body, ';' makes a prototype
    body,
  };

  void step(char c, std::vector<kernel_event>& out) {
    const auto cls = lex_.step(c);
    if (cls == detail::lex_class::code) in_literal_ = false;  // also ends a character literal the lexer gave up on
    if (cls == detail::lex_class::code && detail::c_lexer::ident_char(c)) {
      if (!in_ident_) {
        in_ident_ = true;
        ident_at_ = offset_;
        ident_.clear();
      }
      if (ident_.size() < max_name) ident_.push_back(c);
      return;
    }
    if (in_ident_) {
      in_ident_ = false;
      on_identifier(out);
    }
    switch (cls) {
      case detail::lex_class::code:
        if (c == '(' || c == ')' || c == '{' || c == '}' || c == ';') on_punct(c, out);
        return;
      case detail::lex_class::comment: return;
      case detail::lex_class::literal:
        if (!in_literal_) {
          in_literal_ = true;
          literal_plain_ = c == '"';
          literal_len_ = 0;
        } else if (literal_len_++ == 0) {
          literal_first_ = c;
        }
        return;
      case detail::lex_class::literal_end:
        on_literal(literal_plain_ && c == '"' && literal_len_ == 1 && literal_first_ == 'C');
        in_literal_ = false;
        return;
    }
  }

  void arm(std::size_t begin, bool extern_c) {
    phase_ = phase::signature;
    begin_ = begin;
    extern_c_ = extern_c;
    last_ident_.clear();
  }

  void on_identifier(std::vector<kernel_event>& out) {
    switch (phase_) {
      case phase::idle:
        if (ident_ == "extern") {
          phase_ = phase::saw_extern;
          extern_at_ = ident_at_;
        } else if (ident_ == "__global__") {
          arm(ident_at_, extern_block_ != 0);
        }
        return;
      case phase::saw_extern:
        phase_ = phase::idle;
        on_identifier(out);
        return;
      case phase::saw_extern_c:
        if (ident_ == "__global__") {
          arm(extern_at_, true);
        } else {
          phase_ = phase::idle;
          on_identifier(out);
        }
        return;
      case phase::signature: last_ident_ = ident_; return;
      default: return;
    }
  }

  void on_literal(bool is_c) {
    if (phase_ == phase::saw_extern && is_c) {
      phase_ = phase::saw_extern_c;
    } else if (phase_ == phase::saw_extern || phase_ == phase::saw_extern_c) {
      phase_ = phase::idle;
    }
  }

  void on_punct(char c, std::vector<kernel_event>& out) {
    if (c == '{') ++depth_;
    if (c == '}' && depth_ > 0) {
      --depth_;
      if (depth_ < extern_block_) extern_block_ = 0;
    }
    const bool breaks = c == '{' || c == '}' || c == ';';  // cannot occur inside a signature
    switch (phase_) {
      case phase::idle: return;
      case phase::saw_extern: phase_ = phase::idle; return;
      case phase::saw_extern_c:
        if (c == '{') extern_block_ = depth_;
        phase_ = phase::idle;
        return;
      case phase::signature:
        if (c == '(' && last_ident_ == "__launch_bounds__") {
          phase_ = phase::launch_bounds;
          parens_ = 1;
        } else if (c == '(' && !last_ident_.empty()) {
          phase_ = phase::params;
          parens_ = 1;
          out.push_back({.kind = kernel_event_kind::declared, .name = last_ident_, .extern_c = extern_c_,
                         .span = {begin_, offset_ + 1}});
        } else {
          phase_ = phase::idle;
        }
        return;
      case phase::launch_bounds:
      case phase::params:
        if (breaks) {
          phase_ = phase::idle;
        } else if (c == '(') {
          ++parens_;
        } else if (--parens_ == 0) {
          if (phase_ == phase::launch_bounds) last_ident_.clear();
          phase_ = phase_ == phase::launch_bounds ? phase::signature : phase::after_params;
        }
        return;
      case phase::after_params:
        if (c == '{') {
          phase_ = phase::body;
          body_depth_ = 1;
        } else if (breaks) {
          phase_ = phase::idle;
        }
        return;
      case phase::body:
        if (c == '{') ++body_depth_;
        if (c == '}' && --body_depth_ == 0) {
          phase_ = phase::idle;
          out.push_back({.kind = kernel_event_kind::completed, .name = last_ident_, .extern_c = extern_c_,
                         .span = {begin_, offset_ + 1}});
        }
        return;
    }
  }

  detail::c_lexer lex_;
  std::size_t offset_ = 0;
  std::string ident_;  // identifier being read
  std::size_t ident_at_ = 0;
  bool in_ident_ = false;
  bool in_literal_ = false;
  bool literal_plain_ = false;  // opened by '"' (not a character or raw literal)
  std::size_t literal_len_ = 0;
  char literal_first_ = 0;
  phase phase_ = phase::idle;
  std::size_t extern_at_ = 0;
  std::size_t begin_ = 0;
  bool extern_c_ = false;
  std::string last_ident_;  // in the signature: the name once '(' comes
  std::size_t parens_ = 0;
  std::size_t body_depth_ = 0;
  std::size_t depth_ = 0;         // every brace in code
  std::size_t extern_block_ = 0;  // depth_ inside an open `extern "C" {` block, 0 when none
};

namespace detail {

/// The __global__ functions a source declares, each name once, in order: with and without C linkage.
struct declarations {
  std::vector<std::string> extern_c;
  std::vector<std::string> other;
};

inline declarations declared_globals(std::string_view source) {
  declarations d;
  for (auto& e : brace_tracker{}.feed(source)) {
    auto& names = e.extern_c ? d.extern_c : d.other;
    if (e.kind == kernel_event_kind::declared && std::find(names.begin(), names.end(), e.name) == names.end())
      names.push_back(std::move(e.name));
  }
  return d;
}

}  // namespace detail

/// The `extern "C" __global__` kernels a source declares, in order of first declaration, each once.
/// @code
///   declared_kernels("extern \"C\" __global__ void add(float* x) { x[0] += 1; }");  // {"add"}
/// @endcode
inline std::vector<std::string> declared_kernels(std::string_view source) {
  return detail::declared_globals(source).extern_c;
}

// ---- extract_candidate ---------------------------------------------------------------

/// How `extract_candidate` reads a model's text.
struct extract_options {
  /// A candidate needs a `plan` block; when false a source alone is a
  /// candidate (its plan is "" unless one pairs with it) and the caller may
  /// synthesise a default plan.
  bool require_plan = true;
  /// When no fenced source block defines a kernel, also accept an unfenced
  /// `extern "C" __global__` function with a balanced body in the prose
  /// (think-then-write traces; used by the fork answer parser).
  bool allow_inline_code = false;
  friend bool operator==(const extract_options&, const extract_options&) = default;
};

inline void to_json(nlohmann::json& j, const extract_options& o) {
  j = nlohmann::json{{"require_plan", o.require_plan}, {"allow_inline_code", o.allow_inline_code}};
}
/// Open (json.hpp's conventions): absent keys keep their defaults, unknown
/// keys are ignored, and a key of the wrong type throws `detail::json_read_error`.
inline void from_json(const nlohmann::json& j, extract_options& o) {
  detail::read_key(j, "require_plan", o.require_plan);
  detail::read_key(j, "allow_inline_code", o.allow_inline_code);
}

/// Why no candidate could be extracted.
enum class extract_reason : std::uint8_t {
  no_code,                    ///< no source block and no kernel anywhere
  truncated,                  ///< the text ends inside an unterminated source or plan block (or inline kernel)
  no_plan,                    ///< kernels found, but no plan block pairs with them
  no_kernel,                  ///< source blocks found, but none declares an `extern "C" __global__` kernel
  plan_names_unknown_kernel,  ///< the plan launches a kernel the source does not declare
  plan_launches_nothing,      ///< the plan has no `launch` line
};

inline constexpr std::array<std::string_view, 6> extract_reason_names{
    "no_code", "truncated", "no_plan", "no_kernel", "plan_names_unknown_kernel", "plan_launches_nothing"};

constexpr std::string_view to_string(extract_reason r) noexcept {
  return extract_reason_names[static_cast<std::size_t>(r)];
}

struct extract_failure {
  extract_reason reason = extract_reason::no_code;
  std::string message;  ///< what was wrong and what to write instead, fit to show the model
  friend bool operator==(const extract_failure&, const extract_failure&) = default;
};

/// A candidate found in text: copies of its blocks' contents and where they are.
struct extracted {
  std::string source;
  std::string plan;                  ///< "" when no plan pairs (only with `require_plan = false`)
  std::size_t begin = 0, end = 0;    ///< byte span of the winning blocks (fence lines included) in the text
  std::vector<std::string> kernels;  ///< `extern "C" __global__` kernels the source declares
  text_span source_span;             ///< where `source` is in the text
  text_span plan_span;               ///< where `plan` is in the text ({0, 0} when absent)
  bool inline_source = false;        ///< the source came from prose, not a fenced block
  friend bool operator==(const extracted&, const extracted&) = default;
};

namespace detail {

inline bool is_source_tag(std::string_view tag) noexcept {
  return tag == "cuda" || tag == "cu" || tag == "cpp" || tag == "c++" || tag == "cuh" || tag == "c";
}

/// The names after `launch` at the start of the plan's lines ("" for a `launch` with no name).
inline std::vector<std::string> plan_launch_names(std::string_view plan) {
  std::vector<std::string> names;
  std::size_t i = 0;
  while (i < plan.size()) {
    const std::size_t eol = std::min(plan.find('\n', i), plan.size());
    std::string_view line = plan.substr(i, eol - i);
    i = eol + 1;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) continue;
    line.remove_prefix(first);
    if (line.size() < 7 || line.substr(0, 6) != "launch" || (line[6] != ' ' && line[6] != '\t')) continue;
    line.remove_prefix(std::min(line.find_first_not_of(" \t", 6), line.size()));
    std::size_t n = 0;
    while (n < line.size() && n < brace_tracker::max_name && c_lexer::ident_char(line[n])) ++n;
    names.emplace_back(line.substr(0, n));
  }
  return names;
}

/// "`a`, `b` and 3 more": a bounded list for messages (names may be many or long).
inline std::string quoted_list(const std::vector<std::string>& names) {
  constexpr std::size_t shown = 8;
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) s += fmt::format("{}`{}`", i ? ", " : "", names[i]);
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

/// A source or plan found in the text, in text order.
struct extract_item {
  bool is_plan = false;
  bool inline_code = false;
  text_span block;    // what `extracted::begin/end` cover
  text_span content;  // what is copied out
  std::vector<std::string> kernels;
};

/// What the scan of the text found, candidates or not.
struct extract_scan {
  std::vector<extract_item> items;
  std::vector<std::string> non_extern_c;  // __global__ kernels without C linkage, for the no_kernel message
  bool source_without_kernel = false;
  std::optional<std::string> truncated;   // what was cut off, for the message
};

/// Unfenced `extern "C" __global__` functions in `[from, to)` of `text`. Each
/// `extern` starts a fresh tracker (prose before it may hold apostrophes that a
/// lexer would read as literals); scanning resumes where that tracker gave up,
/// so every byte is scanned once.
inline void find_inline_kernels(std::string_view text, std::size_t from, std::size_t to, extract_scan& scan) {
  std::vector<extract_item> found;
  std::size_t pos = from;
  while (pos < to) {
    const std::size_t at = text.substr(0, to).find("extern", pos);
    if (at == std::string_view::npos) break;
    brace_tracker bt;
    std::size_t i = at;
    std::optional<kernel_event> done;
    while (i < to && !done) {
      for (auto& e : bt.feed(text.substr(i++, 1))) {
        if (e.kind == kernel_event_kind::completed && e.extern_c && e.span.begin == 0) done = std::move(e);
      }
      if (bt.idle()) break;
    }
    if (done) {
      const text_span span{at, at + done->span.end};
      // Kernels written back to back (only whitespace between) form one source.
      const bool joins = !found.empty() &&
                         text.substr(found.back().block.end, at - found.back().block.end).find_first_not_of(" \t\r\n") ==
                             std::string_view::npos;
      if (joins) {
        found.back().block.end = found.back().content.end = span.end;
        if (std::find(found.back().kernels.begin(), found.back().kernels.end(), done->name) == found.back().kernels.end())
          found.back().kernels.push_back(done->name);
      } else {
        found.push_back({.is_plan = false, .inline_code = true, .block = span, .content = span, .kernels = {done->name}});
      }
    } else if (i == to && bt.inside_kernel()) {
      scan.truncated = "an unfenced `extern \"C\" __global__` function whose body never closes";
    }
    pos = std::max(i, at + 1);
  }
  scan.items.insert(scan.items.end(), found.begin(), found.end());
}

inline extract_scan scan_text(std::string_view text, const extract_options& opt) {
  extract_scan scan;
  fence_scanner fs;
  auto blocks = fs.feed(text);
  for (auto& b : fs.finish()) blocks.push_back(std::move(b));

  std::vector<extract_item> plans;  // kept apart so inline sources can be merged in text order
  bool fenced_source = false;
  for (const auto& b : blocks) {
    if (b.tag == "plan") {
      plans.push_back({.is_plan = true, .inline_code = false, .block = b.block, .content = b.content, .kernels = {}});
    } else if (is_source_tag(b.tag)) {
      auto found = declared_globals(b.content.of(text));
      if (found.extern_c.empty()) {
        scan.source_without_kernel = true;
        scan.non_extern_c.insert(scan.non_extern_c.end(), found.other.begin(), found.other.end());
        continue;
      }
      fenced_source = true;
      scan.items.push_back({.is_plan = false, .inline_code = false, .block = b.block, .content = b.content,
                            .kernels = std::move(found.extern_c)});
    }
  }
  if (fs.inside_fence() && (is_source_tag(fs.open_tag()) || fs.open_tag() == "plan"))
    scan.truncated = fmt::format("an unterminated ```{} block (opened at byte {})", fs.open_tag(), fs.open_at());

  if (!fenced_source && opt.allow_inline_code) {
    std::size_t from = 0;
    for (const auto& b : blocks) {
      find_inline_kernels(text, from, b.block.begin, scan);
      from = b.block.end;
    }
    find_inline_kernels(text, from, fs.inside_fence() ? fs.open_at() : text.size(), scan);
  }
  scan.items.insert(scan.items.end(), plans.begin(), plans.end());
  std::stable_sort(scan.items.begin(), scan.items.end(),
                   [](const extract_item& a, const extract_item& b) { return a.block.begin < b.block.begin; });
  return scan;
}

inline extract_failure no_candidate(const extract_scan& scan, const extract_options& opt) {
  constexpr std::string_view how =
      "Write the device code in a fenced block tagged cuda (```cuda ... ```) that declares each kernel as "
      "`extern \"C\" __global__ void name(...)`";
  constexpr std::string_view plan_how =
      ", followed by a ```plan block with one line per launch, e.g. "
      "`launch name grid(cdiv(N,256)) block(256) smem(0) args(x, y, N)`.";
  if (scan.truncated)
    return {extract_reason::truncated,
            fmt::format("The answer ends inside {}: it was cut off before the closing fence, so no complete candidate "
                        "was found. Give a shorter, complete answer. {}{}",
                        *scan.truncated, how, opt.require_plan ? plan_how : std::string_view("."))};
  for (auto item = scan.items.rbegin(); item != scan.items.rend(); ++item)  // name the latest kernels
    if (!item->is_plan)
      return {extract_reason::no_plan,
              fmt::format("Found the kernel(s) {} but no launch plan. Add a ```plan block right after the source block, "
                          "with one line per launch, e.g. `launch {} grid(cdiv(N,256)) block(256) smem(0) args(...)`.",
                          quoted_list(item->kernels), item->kernels.front())};
  if (scan.source_without_kernel || !scan.non_extern_c.empty()) {
    std::string which = scan.non_extern_c.empty()
                            ? std::string("Found a source block, but it declares no `extern \"C\" __global__` kernel")
                            : fmt::format("Found the __global__ function(s) {} without `extern \"C\"`", quoted_list(scan.non_extern_c));
    return {extract_reason::no_kernel,
            fmt::format("{}; a launch plan can only name kernels with C linkage. {}{}", which, how,
                        opt.require_plan ? plan_how : std::string_view("."))};
  }
  return {extract_reason::no_code,
          fmt::format("No CUDA source found in the answer. {}{}", how, opt.require_plan ? plan_how : std::string_view("."))};
}

}  // namespace detail

/**
 * Finds the last complete candidate in a model's text.
 *
 * Pairing: sources and plans are taken in text order, ignoring prose and
 * other blocks; a source pairs with the plan right after it, or else with the
 * plan right before it. The candidate that ends last wins. With
 * `require_plan = false` an unpaired source is a candidate too.
 *
 * @code
 *   auto c = specgen::extract_candidate(
 *       "```cuda\nextern \"C\" __global__ void k(float* x) { x[0] = 1; }\n```\n"
 *       "```plan\nlaunch k grid(1) block(1) smem(0) args(x)\n```\n");
 *   // c->kernels == {"k"}, c->plan == "launch k grid(1) block(1) smem(0) args(x)\n"
 * @endcode
 */
inline expected<extracted, extract_failure> extract_candidate(std::string_view text, const extract_options& opt = {}) {
  const auto scan = detail::scan_text(text, opt);
  const auto& items = scan.items;

  const detail::extract_item* best_source = nullptr;
  const detail::extract_item* best_plan = nullptr;
  std::size_t best_end = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].is_plan) continue;
    const detail::extract_item* plan = nullptr;
    if (i + 1 < items.size() && items[i + 1].is_plan) plan = &items[i + 1];
    else if (i > 0 && items[i - 1].is_plan) plan = &items[i - 1];
    if (!plan && opt.require_plan) continue;
    const std::size_t end = plan ? std::max(items[i].block.end, plan->block.end) : items[i].block.end;
    if (!best_source || end > best_end) {
      best_source = &items[i];
      best_plan = plan;
      best_end = end;
    }
  }
  if (!best_source) return unexpected(detail::no_candidate(scan, opt));

  extracted out;
  out.source = std::string(best_source->content.of(text));
  out.source_span = best_source->content;
  out.kernels = best_source->kernels;
  out.inline_source = best_source->inline_code;
  out.begin = best_source->block.begin;
  out.end = best_end;
  if (best_plan) {
    out.plan = std::string(best_plan->content.of(text));
    out.plan_span = best_plan->content;
    out.begin = std::min(out.begin, best_plan->block.begin);

    const auto launches = detail::plan_launch_names(out.plan);
    if (launches.empty())
      return unexpected(extract_failure{
          extract_reason::plan_launches_nothing,
          fmt::format("The ```plan block launches nothing. Add one line per kernel launch, in order, e.g. "
                      "`launch {} grid(cdiv(N,256)) block(256) smem(0) args(...)`.",
                      out.kernels.front())});
    std::vector<std::string> unknown;
    for (const auto& name : launches)
      if (!name.empty() && std::find(out.kernels.begin(), out.kernels.end(), name) == out.kernels.end() &&
          std::find(unknown.begin(), unknown.end(), name) == unknown.end())
        unknown.push_back(name);
    if (!unknown.empty())
      return unexpected(extract_failure{
          extract_reason::plan_names_unknown_kernel,
          fmt::format("The plan launches {}, which the source does not declare; the source declares {}. Launch only "
                      "kernels declared as `extern \"C\" __global__ void name(...)` in the source block, or rename them "
                      "to match.",
                      detail::quoted_list(unknown), detail::quoted_list(out.kernels))});
  }
  return out;
}

SPECGEN_END_NAMESPACE
