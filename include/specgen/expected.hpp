#pragma once
/// A small `expected<T, E>` for C++20 (std::expected arrives in C++23), with
/// the same monadic operations: `and_then`, `transform`, `or_else` and
/// `transform_error`, so that a chain of fallible steps needs no hand-written
/// `if (!r) return unexpected(r.error());` between them.
///
/// Errors are values at boundaries where a caller can act on them:
/// @code
///   specgen::expected<int, specgen::error> r = parse(text);
///   if (!r) std::cerr << r.error().message;
///   auto doubled = parse(text).transform([](int v) { return 2 * v; });   // expected<int, error>
///   auto checked = parse(text).and_then([](int v) -> specgen::expected<int> {
///     if (v < 0) return specgen::unexpected(specgen::error{"negative"});
///     return v;
///   });
/// @endcode
#include <specgen/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

SPECGEN_BEGIN_NAMESPACE

/// What kind of failure an `error` is, for callers that branch on it; most
/// errors are `generic` and only their text matters.
enum class errc : std::uint8_t {
  generic,           ///< no particular kind
  syntax,            ///< an expression's text is not an expression
  unknown_name,      ///< an expression names a size that has no value
  division_by_zero,  ///< `/` or `cdiv` with a zero divisor
  overflow,          ///< a literal or an intermediate result leaves signed 64 bits
};

/// The one error value of the library: what is wrong and where, so a person
/// (or a model) can act on it without a debugger. `error{"text"}` is the
/// common case; the other members say where the fault lies when it is known
/// (a file and a JSON pointer into it, a line and column of a plan, a column
/// of an expression) and `what()` puts them together.
struct error {
  std::string message;    ///< the problem, one line, without the place
  std::string file{};     ///< the file at fault; "" when none
  std::string where{};    ///< inside it: a JSON pointer ("/inputs/2/shape"), or a plan field ("grid.x")
  int line = 0;           ///< 1-based line of a text; 0 when not tied to a line
  int column = 0;         ///< 1-based column; 0 when unknown
  errc code = errc::generic;
  bool retryable = false;  ///< the same request may succeed later (a backend's overload, a dropped connection)
  std::string source{};    ///< an expression's text, which `column` points into

  /// "file: line 3, column 12: where: message" (the parts that are known);
  /// for an expression's error (a `code` other than `generic`), then the
  /// expression and a caret under the offending character.
  [[nodiscard]] std::string what() const {
    std::string out;
    if (!file.empty()) out += file + ": ";
    if (line > 0) {
      out += "line " + std::to_string(line);
      if (column > 0) out += ", column " + std::to_string(column);
      out += ": ";
    } else if (column > 0) {
      out += "column " + std::to_string(column) + ": ";
    }
    if (!where.empty()) out += where + ": ";
    out += message;
    if (code != errc::generic)  // an expression's error: its text, and a caret under the fault
      out += "\n  " + source + "\n  " + std::string(column > 0 ? static_cast<std::size_t>(column - 1) : 0, ' ') + "^";
    return out;
  }
  friend bool operator==(const error&, const error&) = default;
};

template <class E>
struct unexpected {
  E value;
  explicit unexpected(E e) : value(std::move(e)) {}
};
template <class E>
unexpected(E) -> unexpected<E>;

/// Thrown by `expected::value()` on an error; a programming error at the call site.
class bad_expected_access : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

template <class T, class E = error>
class expected;

namespace detail {
template <class X>
struct is_expected : std::false_type {};
template <class U, class G>
struct is_expected<expected<U, G>> : std::true_type {};

/// `f(args...)` as an expected holding its result (or holding nothing, for a void result).
template <class E, class F, class... A>
auto expected_of(F&& f, A&&... args) {
  using U = std::remove_cvref_t<std::invoke_result_t<F, A...>>;
  if constexpr (std::is_void_v<U>) {
    std::invoke(std::forward<F>(f), std::forward<A>(args)...);
    return expected<void, E>();
  } else {
    return expected<U, E>(std::invoke(std::forward<F>(f), std::forward<A>(args)...));
  }
}
}  // namespace detail

template <class T, class E>
class expected {
 public:
  using value_type = T;
  using error_type = E;

  expected() requires std::is_default_constructible_v<T> : v_(std::in_place_index<0>) {}
  expected(const T& v) : v_(std::in_place_index<0>, v) {}       // NOLINT implicit by design
  expected(T&& v) : v_(std::in_place_index<0>, std::move(v)) {}  // NOLINT
  template <class G>
  expected(unexpected<G> e) : v_(std::in_place_index<1>, E(std::move(e.value))) {}  // NOLINT

  [[nodiscard]] bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T&& operator*() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }

  T& value() & { check(); return std::get<0>(v_); }
  const T& value() const& { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::get<0>(std::move(v_)); }

  E& error() & { return std::get<1>(v_); }
  const E& error() const& { return std::get<1>(v_); }
  E&& error() && { return std::get<1>(std::move(v_)); }

  template <class U>
  T value_or(U&& fallback) const& {
    return has_value() ? std::get<0>(v_) : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U>
  T value_or(U&& fallback) && {
    return has_value() ? std::get<0>(std::move(v_)) : static_cast<T>(std::forward<U>(fallback));
  }

  /// `f(value)`, an expected with the same error type, or this error.
  template <class F>
  auto and_then(F&& f) & { return and_then_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto and_then(F&& f) const& { return and_then_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto and_then(F&& f) && { return and_then_impl(std::move(*this), std::forward<F>(f)); }

  /// `f(value)` as the new value (void allowed), or this error.
  template <class F>
  auto transform(F&& f) & { return transform_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto transform(F&& f) const& { return transform_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto transform(F&& f) && { return transform_impl(std::move(*this), std::forward<F>(f)); }

  /// This value, or `f(error)`, an expected with the same value type.
  template <class F>
  auto or_else(F&& f) & { return or_else_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto or_else(F&& f) const& { return or_else_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto or_else(F&& f) && { return or_else_impl(std::move(*this), std::forward<F>(f)); }

  /// This value, or `f(error)` as the new error.
  template <class F>
  auto transform_error(F&& f) & { return transform_error_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto transform_error(F&& f) const& { return transform_error_impl(*this, std::forward<F>(f)); }
  template <class F>
  auto transform_error(F&& f) && { return transform_error_impl(std::move(*this), std::forward<F>(f)); }

 private:
  void check() const {
    if (!has_value()) throw bad_expected_access("specgen::expected holds an error");
  }
  template <class Self, class F>
  static auto and_then_impl(Self&& self, F&& f) {
    using R = std::remove_cvref_t<std::invoke_result_t<F, decltype(*std::forward<Self>(self))>>;
    static_assert(detail::is_expected<R>::value, "and_then: the function must return a specgen::expected");
    static_assert(std::is_same_v<typename R::error_type, E>, "and_then: the function must keep the error type");
    if (self.has_value()) return R(std::invoke(std::forward<F>(f), *std::forward<Self>(self)));
    return R(unexpected<E>(std::forward<Self>(self).error()));
  }
  template <class Self, class F>
  static auto transform_impl(Self&& self, F&& f) {
    using U = std::remove_cvref_t<std::invoke_result_t<F, decltype(*std::forward<Self>(self))>>;
    if (self.has_value()) return detail::expected_of<E>(std::forward<F>(f), *std::forward<Self>(self));
    return expected<U, E>(unexpected<E>(std::forward<Self>(self).error()));
  }
  template <class Self, class F>
  static auto or_else_impl(Self&& self, F&& f) {
    using R = std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error())>>;
    static_assert(detail::is_expected<R>::value, "or_else: the function must return a specgen::expected");
    static_assert(std::is_same_v<typename R::value_type, T>, "or_else: the function must keep the value type");
    if (self.has_value()) return R(*std::forward<Self>(self));
    return R(std::invoke(std::forward<F>(f), std::forward<Self>(self).error()));
  }
  template <class Self, class F>
  static auto transform_error_impl(Self&& self, F&& f) {
    using G = std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error())>>;
    if (self.has_value()) return expected<T, G>(*std::forward<Self>(self));
    return expected<T, G>(unexpected<G>(std::invoke(std::forward<F>(f), std::forward<Self>(self).error())));
  }
  std::variant<T, E> v_;
};

/// `expected<void, E>`: success carries nothing.
template <class E>
class expected<void, E> {
 public:
  using value_type = void;
  using error_type = E;

  expected() = default;
  template <class G>
  expected(unexpected<G> e) : err_(E(std::move(e.value))), ok_(false) {}  // NOLINT
  [[nodiscard]] bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  E& error() & { return err_; }
  const E& error() const& { return err_; }
  E&& error() && { return std::move(err_); }

  /// `f()`, an expected with the same error type, or this error.
  template <class F>
  auto and_then(F&& f) const {
    using R = std::remove_cvref_t<std::invoke_result_t<F>>;
    static_assert(detail::is_expected<R>::value, "and_then: the function must return a specgen::expected");
    static_assert(std::is_same_v<typename R::error_type, E>, "and_then: the function must keep the error type");
    if (ok_) return R(std::invoke(std::forward<F>(f)));
    return R(unexpected<E>(err_));
  }
  /// `f()` as the value (void allowed), or this error.
  template <class F>
  auto transform(F&& f) const {
    using U = std::remove_cvref_t<std::invoke_result_t<F>>;
    if (ok_) return detail::expected_of<E>(std::forward<F>(f));
    return expected<U, E>(unexpected<E>(err_));
  }
  /// Success, or `f(error)`, an `expected<void, G>`.
  template <class F>
  auto or_else(F&& f) const {
    using R = std::remove_cvref_t<std::invoke_result_t<F, const E&>>;
    static_assert(detail::is_expected<R>::value && std::is_void_v<typename R::value_type>,
                  "or_else: the function must return a specgen::expected<void, G>");
    if (ok_) return R();
    return R(std::invoke(std::forward<F>(f), err_));
  }
  /// Success, or `f(error)` as the new error.
  template <class F>
  auto transform_error(F&& f) const {
    using G = std::remove_cvref_t<std::invoke_result_t<F, const E&>>;
    if (ok_) return expected<void, G>();
    return expected<void, G>(unexpected<G>(std::invoke(std::forward<F>(f), err_)));
  }

 private:
  E err_{};
  bool ok_ = true;
};

SPECGEN_END_NAMESPACE
