#pragma once
/// Size expressions: the integer arithmetic a task's shapes and a launch plan
/// are written in.
///
/// An expression is parsed once into a small immutable tree (`size_expr`,
/// one shared pointer, cheap to copy) and evaluated against a binding of size
/// symbols as often as needed. Arithmetic is signed 64-bit and checked:
/// overflow, division by zero and unknown names are errors carrying the
/// position in the text, never undefined behaviour.
///
/// @code
///   auto e = specgen::parse_size_expr("cdiv(N, 256) * 4");
///   if (!e) { std::cerr << e.error().what(); return; }
///   auto v = e->eval({{"N", 1000}});   // expected<int64_t, error>: 16
///   e->to_string();                     // "cdiv(N, 256) * 4"
///   e->names();                         // {"N"}
/// @endcode
///
/// Grammar (whitespace is free between tokens):
/// @verbatim
///   expr    := term (('+' | '-') term)*
///   term    := unary (('*' | '/') unary)*
///   unary   := '-' unary | primary
///   primary := INTEGER | NAME | FUNC '(' expr ',' expr ')' | '(' expr ')'
///   FUNC    := 'cdiv' | 'min' | 'max'
///   NAME    := [A-Za-z_][A-Za-z0-9_]*        INTEGER := [0-9]+
/// @endverbatim
/// `/` truncates toward zero (as in C++ and CUDA); `cdiv(a, b)` is the
/// mathematical ceiling of a / b (so `cdiv(7, 2) == 4`, `cdiv(-7, 2) == -3`).
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// Values for the names of an expression (the same type as `shape_binding`).
using size_binding = std::map<std::string, std::int64_t>;

/// A caller-supplied way to look names up; `nullopt` means "unknown name".
using size_lookup = std::function<std::optional<std::int64_t>(std::string_view)>;

namespace detail {

/// An expression's error: `message` at byte `at` of `text`, shown by
/// `error::what()` as "column N: message" with the text and a caret under it.
inline error expr_failure(errc code, std::size_t at, std::string message, std::string text) {
  return error{.message = std::move(message), .column = static_cast<int>(at) + 1, .code = code, .source = std::move(text)};
}

enum class expr_op : std::uint8_t { literal, name, neg, add, sub, mul, div, cdiv, min, max };

struct expr_node {
  expr_op op = expr_op::literal;
  std::int64_t value = 0;  ///< literal
  std::string name{};      ///< name
  std::size_t pos = 0;     ///< where the node's token starts (operator for binary ops)
  std::uint32_t lhs = 0, rhs = 0;
  std::uint32_t depth = 1;
};

/// The whole tree in one allocation-friendly block; nodes refer to each other by index.
struct expr_tree {
  std::string text;
  std::vector<expr_node> nodes;
  std::uint32_t root = 0;
};

/// Deeper trees are rejected so that evaluation and printing (recursive) can
/// never exhaust the stack, whatever a model writes.
inline constexpr std::uint32_t max_expr_depth = 200;

inline constexpr std::string_view function_names[] = {"cdiv", "max", "min"};

constexpr bool is_name_start(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
constexpr bool is_name_char(char c) noexcept { return is_name_start(c) || (c >= '0' && c <= '9'); }

/// True for a non-empty NAME token of the grammar.
constexpr bool is_identifier(std::string_view s) noexcept {
  if (s.empty() || !is_name_start(s.front())) return false;
  return std::all_of(s.begin() + 1, s.end(), is_name_char);
}

class expr_parser {
 public:
  explicit expr_parser(std::string_view text) : text_(text) { tree_->text = std::string(text); }

  expected<std::shared_ptr<const expr_tree>, error> run() {
    skip_space();
    if (at_end()) return fail(0, "expected an expression, found nothing");
    auto root = parse_sum();
    if (!root) return unexpected(root.error());
    skip_space();
    if (!at_end()) return fail(pos_, fmt::format("unexpected '{}' after a complete expression", text_[pos_]));
    tree_->root = *root;
    return std::shared_ptr<const expr_tree>(std::move(tree_));
  }

 private:
  using result = expected<std::uint32_t, error>;

  bool at_end() const noexcept { return pos_ >= text_.size(); }
  void skip_space() noexcept {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  unexpected<error> fail(std::size_t at, std::string msg, errc code = errc::syntax) const {
    return unexpected(expr_failure(code, at, std::move(msg), std::string(text_)));
  }
  std::string describe_here() const {
    return at_end() ? std::string("the end") : fmt::format("'{}'", text_[pos_]);
  }

  result add(expr_node n) {
    std::uint32_t d = 0;
    if (n.op != expr_op::literal && n.op != expr_op::name) d = tree_->nodes[n.lhs].depth;
    if (n.op != expr_op::literal && n.op != expr_op::name && n.op != expr_op::neg)
      d = std::max(d, tree_->nodes[n.rhs].depth);
    n.depth = d + 1;
    if (n.depth > max_expr_depth)
      return fail(n.pos, fmt::format("expression nested too deeply (more than {} levels)", max_expr_depth));
    tree_->nodes.push_back(std::move(n));
    return static_cast<std::uint32_t>(tree_->nodes.size() - 1);
  }

  result parse_sum() {
    auto lhs = parse_product();
    if (!lhs) return lhs;
    for (;;) {
      skip_space();
      if (at_end() || (text_[pos_] != '+' && text_[pos_] != '-')) return lhs;
      const std::size_t at = pos_;
      const expr_op op = text_[pos_++] == '+' ? expr_op::add : expr_op::sub;
      auto rhs = parse_product();
      if (!rhs) return rhs;
      lhs = add({.op = op, .pos = at, .lhs = *lhs, .rhs = *rhs});
      if (!lhs) return lhs;
    }
  }

  result parse_product() {
    auto lhs = parse_unary();
    if (!lhs) return lhs;
    for (;;) {
      skip_space();
      if (at_end() || (text_[pos_] != '*' && text_[pos_] != '/')) return lhs;
      const std::size_t at = pos_;
      const expr_op op = text_[pos_++] == '*' ? expr_op::mul : expr_op::div;
      auto rhs = parse_unary();
      if (!rhs) return rhs;
      lhs = add({.op = op, .pos = at, .lhs = *lhs, .rhs = *rhs});
      if (!lhs) return lhs;
    }
  }

  result parse_unary() {
    skip_space();
    if (!at_end() && text_[pos_] == '-') {
      const std::size_t at = pos_++;
      // Bound the recursion itself, not only the tree: "------...x" recurses here.
      if (++unary_run_ > max_expr_depth)
        return fail(at, fmt::format("expression nested too deeply (more than {} levels)", max_expr_depth));
      auto operand = parse_unary();
      --unary_run_;
      if (!operand) return operand;
      return add({.op = expr_op::neg, .pos = at, .lhs = *operand});
    }
    return parse_primary();
  }

  result parse_primary() {
    skip_space();
    if (at_end()) return fail(pos_, "expected a number, a name or '(', found the end");
    const std::size_t start = pos_;
    const char c = text_[pos_];
    if (c >= '0' && c <= '9') {
      std::int64_t v = 0;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v)) {
          while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
          return fail(start,
                      fmt::format("integer literal {} does not fit in signed 64 bits",
                                  text_.substr(start, pos_ - start)),
                      errc::overflow);
        }
        ++pos_;
      }
      if (!at_end() && is_name_char(text_[pos_]))
        return fail(pos_, fmt::format("unexpected '{}' in a number", text_[pos_]));
      return add({.op = expr_op::literal, .value = v, .pos = start});
    }
    if (is_name_start(c)) {
      while (!at_end() && is_name_char(text_[pos_])) ++pos_;
      std::string name(text_.substr(start, pos_ - start));
      skip_space();
      if (at_end() || text_[pos_] != '(') return add({.op = expr_op::name, .name = std::move(name), .pos = start});
      return parse_call(start, name);
    }
    if (c == '(') {
      ++pos_;
      if (++paren_depth_ > max_expr_depth)
        return fail(start, fmt::format("expression nested too deeply (more than {} levels)", max_expr_depth));
      auto inner = parse_sum();
      --paren_depth_;
      if (!inner) return inner;
      skip_space();
      if (at_end() || text_[pos_] != ')')
        return fail(pos_, fmt::format("expected ')' to close the '(' at column {}, found {}", start + 1,
                                      describe_here()));
      ++pos_;
      return inner;
    }
    return fail(pos_, fmt::format("expected a number, a name or '(', found '{}'", c));
  }

  result parse_call(std::size_t start, const std::string& name) {
    expr_op op{};
    if (name == "cdiv") op = expr_op::cdiv;
    else if (name == "min") op = expr_op::min;
    else if (name == "max") op = expr_op::max;
    else
      return fail(start, fmt::format("unknown function '{}' (known: {})", name, fmt::join(function_names, ", ")));
    ++pos_;  // '('
    if (++paren_depth_ > max_expr_depth)
      return fail(start, fmt::format("expression nested too deeply (more than {} levels)", max_expr_depth));
    std::uint32_t args[2]{};
    for (int i = 0; i < 2; ++i) {
      auto a = parse_sum();
      if (!a) return a;
      args[i] = *a;
      skip_space();
      const char want = i == 0 ? ',' : ')';
      if (at_end() || text_[pos_] != want) {
        if (i == 0 && !at_end() && text_[pos_] == ')')
          return fail(pos_, fmt::format("{}(a, b) takes 2 arguments, got 1", name));
        if (i == 1 && !at_end() && text_[pos_] == ',')
          return fail(pos_, fmt::format("{}(a, b) takes 2 arguments, got more", name));
        return fail(pos_, fmt::format("expected '{}' in {}(a, b), found {}", want, name, describe_here()));
      }
      ++pos_;
    }
    --paren_depth_;
    return add({.op = op, .pos = start, .lhs = args[0], .rhs = args[1]});
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::uint32_t paren_depth_ = 0;
  std::uint32_t unary_run_ = 0;
  std::shared_ptr<expr_tree> tree_ = std::make_shared<expr_tree>();
};

}  // namespace detail

/// A parsed size expression. Immutable; copies share the tree.
class size_expr {
 public:
  /// The literal 0 (so aggregates holding a `size_expr` default-construct).
  size_expr() : size_expr(literal(0)) {}

  /// An expression that is just the integer `v`.
  static size_expr literal(std::int64_t v) {
    auto t = std::make_shared<detail::expr_tree>();
    if (v < 0 && v != std::numeric_limits<std::int64_t>::min()) {
      t->nodes.push_back({.op = detail::expr_op::literal, .value = -v, .pos = 1});
      t->nodes.push_back({.op = detail::expr_op::neg, .lhs = 0, .depth = 2});
      t->root = 1;
    } else {
      t->nodes.push_back({.op = detail::expr_op::literal, .value = v});
    }
    size_expr e(std::move(t));
    e.tree_mut()->text = e.to_string();
    return e;
  }

  /// Evaluate with every name looked up in `binding`.
  [[nodiscard]] expected<std::int64_t, error> eval(const size_binding& binding) const {
    std::vector<std::string> known;
    known.reserve(binding.size());
    for (const auto& [k, v] : binding) known.push_back(k);
    return eval(
        [&](std::string_view n) -> std::optional<std::int64_t> {
          auto it = binding.find(std::string(n));
          if (it == binding.end()) return std::nullopt;
          return it->second;
        },
        known);
  }

  /// Evaluate with names resolved by `lookup`. `known` only improves the
  /// message of an unknown-name error ("known: M, N").
  [[nodiscard]] expected<std::int64_t, error> eval(const size_lookup& lookup,
                                                        std::span<const std::string> known = {}) const {
    return eval_node(tree_->root, lookup, known);
  }

  /// The distinct names the expression uses, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& n : tree_->nodes)
      if (n.op == detail::expr_op::name) out.push_back(n.name);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  /// Canonical text: single spaces around binary operators, "f(a, b)" for
  /// calls, only the parentheses the tree needs. Parsing it gives an equal
  /// expression, and printing that gives the same text.
  [[nodiscard]] std::string to_string() const {
    std::string out;
    print(tree_->root, out);
    return out;
  }

  /// The text the expression was parsed from.
  [[nodiscard]] const std::string& text() const noexcept { return tree_->text; }

  /// The name, when the whole expression is a single name (e.g. a buffer argument).
  [[nodiscard]] std::optional<std::string_view> as_name() const noexcept {
    const auto& r = tree_->nodes[tree_->root];
    if (r.op != detail::expr_op::name) return std::nullopt;
    return std::string_view(r.name);
  }

  /// The value, when the whole expression is a non-negative integer literal.
  [[nodiscard]] std::optional<std::int64_t> as_literal() const noexcept {
    const auto& r = tree_->nodes[tree_->root];
    if (r.op != detail::expr_op::literal) return std::nullopt;
    return r.value;
  }

  /// Structural equality: "N*2" equals "N * 2" but not "2 * N".
  friend bool operator==(const size_expr& a, const size_expr& b) noexcept {
    return a.tree_ == b.tree_ || equal(*a.tree_, a.tree_->root, *b.tree_, b.tree_->root);
  }

 private:
  friend expected<size_expr, error> parse_size_expr(std::string_view text);
  explicit size_expr(std::shared_ptr<const detail::expr_tree> t) : tree_(std::move(t)) {}
  detail::expr_tree* tree_mut() { return const_cast<detail::expr_tree*>(tree_.get()); }  // only while building

  static bool equal(const detail::expr_tree& ta, std::uint32_t a, const detail::expr_tree& tb, std::uint32_t b) noexcept {
    const auto& x = ta.nodes[a];
    const auto& y = tb.nodes[b];
    if (x.op != y.op) return false;
    switch (x.op) {
      case detail::expr_op::literal: return x.value == y.value;
      case detail::expr_op::name: return x.name == y.name;
      case detail::expr_op::neg: return equal(ta, x.lhs, tb, y.lhs);
      default: return equal(ta, x.lhs, tb, y.lhs) && equal(ta, x.rhs, tb, y.rhs);
    }
  }

  static int precedence(detail::expr_op op) noexcept {
    switch (op) {
      case detail::expr_op::add:
      case detail::expr_op::sub: return 1;
      case detail::expr_op::mul:
      case detail::expr_op::div: return 2;
      case detail::expr_op::neg: return 3;
      default: return 4;
    }
  }

  void print_operand(std::uint32_t i, bool parens, std::string& out) const {
    if (parens) out += '(';
    print(i, out);
    if (parens) out += ')';
  }

  void print(std::uint32_t i, std::string& out) const {
    using detail::expr_op;
    const auto& n = tree_->nodes[i];
    const int p = precedence(n.op);
    switch (n.op) {
      case expr_op::literal:
        // Only `literal(INT64_MIN)` stores a negative value; spell it so that it parses back.
        out += n.value < 0 ? std::string("(-9223372036854775807 - 1)") : std::to_string(n.value);
        return;
      case expr_op::name: out += n.name; return;
      case expr_op::neg:
        out += '-';
        print_operand(n.lhs, precedence(tree_->nodes[n.lhs].op) < p, out);
        return;
      case expr_op::cdiv:
      case expr_op::min:
      case expr_op::max:
        out += n.op == expr_op::cdiv ? "cdiv(" : n.op == expr_op::min ? "min(" : "max(";
        print(n.lhs, out);
        out += ", ";
        print(n.rhs, out);
        out += ')';
        return;
      default: {
        static constexpr std::string_view sym[] = {"", "", "", " + ", " - ", " * ", " / "};
        // Left-associative: a right operand of equal precedence keeps its parentheses.
        print_operand(n.lhs, precedence(tree_->nodes[n.lhs].op) < p, out);
        out += sym[static_cast<int>(n.op)];
        print_operand(n.rhs, precedence(tree_->nodes[n.rhs].op) <= p, out);
      }
    }
  }

  std::string text_of(std::uint32_t i) const {
    std::string out;
    print(i, out);
    return out;
  }

  expected<std::int64_t, error> eval_node(std::uint32_t i, const size_lookup& lookup,
                                               std::span<const std::string> known) const {
    using detail::expr_op;
    const auto& n = tree_->nodes[i];
    auto fail = [&](errc code, std::string msg) {
      return unexpected(detail::expr_failure(code, n.pos, std::move(msg), tree_->text));
    };
    if (n.op == expr_op::literal) return n.value;
    if (n.op == expr_op::name) {
      if (auto v = lookup(n.name)) return *v;
      if (known.empty()) return fail(errc::unknown_name, fmt::format("unknown name '{}'", n.name));
      return fail(errc::unknown_name,
                  fmt::format("unknown name '{}' (known: {})", n.name, fmt::join(known, ", ")));
    }
    auto a = eval_node(n.lhs, lookup, known);
    if (!a) return a;
    std::int64_t r = 0;
    if (n.op == expr_op::neg) {
      if (__builtin_sub_overflow(std::int64_t{0}, *a, &r))
        return fail(errc::overflow, fmt::format("-({}) overflows signed 64 bits", *a));
      return r;
    }
    auto b = eval_node(n.rhs, lookup, known);
    if (!b) return b;
    const std::int64_t x = *a, y = *b;
    auto overflow = [&](std::string_view op) {
      return fail(errc::overflow, fmt::format("{} {} {} overflows signed 64 bits", x, op, y));
    };
    switch (n.op) {
      case expr_op::add:
        if (__builtin_add_overflow(x, y, &r)) return overflow("+");
        return r;
      case expr_op::sub:
        if (__builtin_sub_overflow(x, y, &r)) return overflow("-");
        return r;
      case expr_op::mul:
        if (__builtin_mul_overflow(x, y, &r)) return overflow("*");
        return r;
      case expr_op::min: return std::min(x, y);
      case expr_op::max: return std::max(x, y);
      default: break;  // div, cdiv
    }
    const bool is_cdiv = n.op == expr_op::cdiv;
    if (y == 0)
      return fail(errc::division_by_zero,
                  fmt::format("division by zero: the divisor '{}' is 0", text_of(n.rhs)));
    if (x == std::numeric_limits<std::int64_t>::min() && y == -1)
      return is_cdiv ? fail(errc::overflow, fmt::format("cdiv({}, -1) overflows signed 64 bits", x))
                     : overflow("/");
    std::int64_t q = x / y;
    // Ceiling: truncation rounded toward -inf exactly when the true quotient is positive and inexact.
    if (is_cdiv && x % y != 0 && ((x < 0) == (y < 0))) ++q;
    return q;
  }

  std::shared_ptr<const detail::expr_tree> tree_;
};

/// Parse `text` (see the grammar above). Errors carry the offending position.
///
/// @code
///   auto e = specgen::parse_size_expr("N + * 2");
///   // !e; e.error().code == errc::syntax; e.error().column == 5
/// @endcode
inline expected<size_expr, error> parse_size_expr(std::string_view text) {
  return detail::expr_parser(text).run().transform(
      [](std::shared_ptr<const detail::expr_tree> tree) { return size_expr(std::move(tree)); });
}

SPECGEN_END_NAMESPACE
