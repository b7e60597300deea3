#pragma once
/// A small `expected<T, E>` for C++20 (std::expected arrives in C++23).
///
/// Errors are values at boundaries where a caller can act on them:
/// @code
///   specgen::expected<int, specgen::error> r = parse(...);
///   if (!r) std::cerr << r.error().message;
/// @endcode
#include <specgen/detail/config.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

SPECGEN_BEGIN_NAMESPACE

/// The generic error value: a message a person (or a model) can act on.
struct error {
  std::string message;
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

  template <class U>
  T value_or(U&& fallback) const& {
    return has_value() ? std::get<0>(v_) : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  void check() const {
    if (!has_value()) throw bad_expected_access("specgen::expected holds an error");
  }
  std::variant<T, E> v_;
};

/// `expected<void, E>`: success carries nothing.
template <class E>
class expected<void, E> {
 public:
  expected() = default;
  template <class G>
  expected(unexpected<G> e) : err_(E(std::move(e.value))), ok_(false) {}  // NOLINT
  [[nodiscard]] bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const E& error() const& { return err_; }

 private:
  E err_{};
  bool ok_ = true;
};

SPECGEN_END_NAMESPACE
