#pragma once
/// The one mechanism behind every policy family (trigger, termination, pool,
/// strategy, KV store, prompt builder): how a policy is held at run time, how
/// it is written as JSON, and how it is built from JSON.
///
/// - **Holding.** `policy::basic_any<Interface, Ownership>` erases the type.
///   The family's interface names its own calls; the template adds `name()`,
///   `config()`, `target<T>()` and the copy behaviour: `ownership::shared`
///   for immutable policies (copies share one instance), `ownership::cloned`
///   for stateful ones (a copy is an independent copy of the state, as the
///   engine needs one trigger per stream).
/// - **Writing.** `policy::config_of(p)` is the only serialiser: a policy that
///   is its own parameter aggregate, or that has `get_params()`, is written as
///   `{"<name>": {params}}` by the field writer (fields.hpp); a composite
///   (`any_of`, `gated`) writes its own `config()`; a user's type without
///   parameters is `{"custom": "<name>"}`.
/// - **Building.** Each family lists its kinds once, in a table of
///   `policy::builder`s, and `policy::make<Family>(json)` reads a config
///   through that table with the one field reader (`detail::read_fields`).
///
/// Adding a family is one header: its interface, its policies, its `any_` type
/// deriving from `basic_any`, and a traits struct with its table:
///
/// @code // namespace scope
///   namespace policy = specgen::policy;
///   struct fancy_thing {  // a policy that is its own parameter aggregate
///     int level = 1;
///     int run(int x) const { return x * level; }
///     std::string name() const { return "fancy"; }
///     template <class Self, class F> static void fields(Self& s, F&& f) { f("level", s.level, specgen::detail::in(1, 9)); }
///   };
///   struct thing_interface {  // the family's calls
///     struct calls { virtual ~calls() = default; virtual int run(int) const = 0; };
///     template <class Base, class T>
///     struct impl : specgen::detail::policy_holder<Base, T> {
///       using specgen::detail::policy_holder<Base, T>::policy_holder;
///       int run(int x) const override { return this->value.run(x); }
///     };
///   };
///   class any_thing : public policy::basic_any<thing_interface, policy::ownership::shared> {
///    public:
///     any_thing(fancy_thing t) : basic_any(std::move(t)) {}
///     int run(int x) const { return self().run(x); }
///   };
///   struct thing_family {
///     using any = any_thing;
///     static constexpr std::string_view name = "thing";
///     static constexpr std::array<policy::builder<any_thing>, 1> kinds{{policy::from_params<any_thing, fancy_thing>("fancy")}};
///   };
///   inline auto t = policy::make<thing_family>(nlohmann::json::parse(R"({"fancy": {"level": 2}})"));  // t->run(3) == 6
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/fields.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace policy {

/// How copies of a type-erased policy relate to each other.
enum class ownership : std::uint8_t {
  shared,  ///< the policy is immutable; copies share one instance
  cloned,  ///< the policy keeps state; a copy clones it
};

/// A policy with parameters: it lists its own fields, or `get_params()` returns an aggregate that does.
template <class T>
concept with_params = detail::has_fields<T> || requires(const T& t) {
  requires detail::has_fields<std::remove_cvref_t<decltype(t.get_params())>>;
};

/// A policy's parameter aggregate: the policy itself when it lists its fields, else `get_params()`.
template <with_params T>
const auto& params_of(const T& t) noexcept {
  if constexpr (detail::has_fields<T>) return t;
  else return t.get_params();
}

/// The JSON config that `make<Family>` rebuilds `t` from: the only serialiser
/// of policies. `{"<name>": {params}}` for a policy with parameters, the
/// policy's own `config()` for a composite, else `{"custom": "<name>"}`
/// (a host's own policy type, which no table knows how to rebuild).
template <class T>
nlohmann::json config_of(const T& t) {
  if constexpr (requires { { t.config() } -> std::convertible_to<nlohmann::json>; }) {
    return t.config();
  } else if constexpr (with_params<T>) {
    return nlohmann::json{{std::string(t.name()), detail::write_fields(params_of(t))}};
  } else {
    return nlohmann::json{{"custom", std::string(t.name())}};
  }
}

}  // namespace policy

namespace detail {
/// Holds the policy value for a family's `impl` (the family's overrides read `value`).
template <class Base, class T>
struct policy_holder : Base {
  explicit policy_holder(T v) : value(std::move(v)) {}
  T value;
};
}  // namespace detail

namespace policy {

/**
 * The type-erasure template of every policy family. `Interface` names the
 * family's calls (`calls`, pure virtual) and how a held policy answers them
 * (`impl`, over `detail::policy_holder`); the family's `any_` type derives
 * from `basic_any` and forwards each call to `self()` (the file comment above
 * has a whole family).
 *
 * Built-in parameters are checked on construction: parameters out of range
 * in code are a programming error (`std::invalid_argument`); JSON configs
 * are checked where they are read, with errors as values.
 */
template <class Interface, ownership Own>
class basic_any {
 public:
  [[nodiscard]] std::string name() const { return self_->name(); }
  /// The JSON config this family's `make` rebuilds the policy from (fresh state).
  [[nodiscard]] nlohmann::json config() const { return self_->config(); }
  /// The policy as its own type, or nullptr when it is another type.
  template <class T>
  [[nodiscard]] const T* target() const noexcept {
    return static_cast<const T*>(self_->target(typeid(T)));
  }

 protected:
  struct calls : Interface::calls {
    virtual std::unique_ptr<calls> clone() const = 0;
    virtual std::string name() const = 0;
    virtual nlohmann::json config() const = 0;
    virtual const void* target(const std::type_info&) const noexcept = 0;
  };

  template <class T>
  explicit basic_any(T t) {
    if constexpr (with_params<T>) detail::require_valid(params_of(t), std::string(t.name()));
    if constexpr (Own == ownership::shared) self_ = std::make_shared<const model<T>>(std::move(t));
    else self_ = std::make_unique<model<T>>(std::move(t));
  }
  basic_any(const basic_any& o) : self_(copy(o.self_)) {}
  basic_any(basic_any&&) noexcept = default;
  basic_any& operator=(const basic_any& o) {
    if (this != &o) self_ = copy(o.self_);
    return *this;
  }
  basic_any& operator=(basic_any&&) noexcept = default;
  ~basic_any() = default;

  /// The family's calls, for the derived `any_` type to forward to.
  [[nodiscard]] const calls& self() const noexcept { return *self_; }
  [[nodiscard]] calls& self() noexcept
    requires(Own == ownership::cloned)
  {
    return *self_;
  }

 private:
  template <class T>
  struct model final : Interface::template impl<calls, T> {
    explicit model(T t) : Interface::template impl<calls, T>(std::move(t)) {}
    std::unique_ptr<calls> clone() const override { return std::make_unique<model>(this->value); }
    std::string name() const override { return std::string(this->value.name()); }
    nlohmann::json config() const override { return config_of(this->value); }
    const void* target(const std::type_info& t) const noexcept override {
      return t == typeid(T) ? &this->value : nullptr;
    }
  };
  using pointer = std::conditional_t<Own == ownership::shared, std::shared_ptr<const calls>, std::unique_ptr<calls>>;
  static pointer copy(const pointer& p) {
    if constexpr (Own == ownership::shared) return p;
    else return p->clone();
  }
  pointer self_;
};

/// One row of a family's table: a kind's name and how to build it from the
/// config's body. `what` names the policy for errors ("trigger fence_closed");
/// `depth` counts enclosing `any_of` lists.
template <class Any>
struct builder {
  std::string_view kind;
  /// Builds the policy from its parameters `body`, found at JSON pointer
  /// `pointer` of the config; `depth` counts the enclosing `any_of`s.
  expected<Any, error> (*build)(const nlohmann::json& body, std::string_view pointer, int depth);
};

}  // namespace policy

namespace detail {
/// A config body that sets parameters (not null, not `{}`).
inline bool has_params(const nlohmann::json& body) { return !body.is_null() && !(body.is_object() && body.empty()); }

/// The error of a kind without parameters whose config sets some.
inline expected<void, error> refuse_params(const nlohmann::json& body, std::string_view pointer) {
  if (!has_params(body)) return {};
  return unexpected(json_error("", pointer, fmt::format("takes no parameters, got {}", shown(body))));
}

/// How many fields aggregate `P` lists.
template <class P>
int field_count() {
  int n = 0;
  P probe{};
  P::fields(probe, [&](const char*, auto&, auto&&...) { ++n; });
  return n;
}

template <class Any, class T>
expected<Any, error> build_from_params(const nlohmann::json& body, std::string_view pointer, int) {
  using P = std::remove_cvref_t<decltype(policy::params_of(std::declval<const T&>()))>;
  if (field_count<P>() == 0)
    if (auto none = refuse_params(body, pointer); !none) return unexpected(none.error());
  return read_fields<P>(body, pointer).transform([](P p) {
    if constexpr (std::is_same_v<P, T>) return Any(std::move(p));
    else return Any(T{std::move(p)});
  });
}
}  // namespace detail

namespace policy {

/// The table row of a policy built from its parameters: `T` itself when it
/// lists its fields, else `T{T::params}` read by the field reader.
template <class Any, class T>
constexpr builder<Any> from_params(std::string_view kind) {
  return {kind, &detail::build_from_params<Any, T>};
}

/// The table row of a policy without parameters (`"never"`, `{"never": {}}`);
/// `make` is a function returning the policy.
template <class Any, auto Make>
constexpr builder<Any> without_params(std::string_view kind) {
  return {kind, [](const nlohmann::json& body, std::string_view pointer, int) -> expected<Any, error> {
            return detail::refuse_params(body, pointer).transform([] { return Any(Make()); });
          }};
}

/// The table row of a family's `any_of` composite: a non-empty array of the
/// family's configs, built by `make<Family>` one level deeper.
template <class Family, class Composite>
constexpr builder<typename Family::any> any_of_builder(std::string_view kind = "any_of");

/// The kinds of a family's table, in its order.
template <class Family>
constexpr auto kinds_of() {
  std::array<std::string_view, std::tuple_size_v<std::remove_cvref_t<decltype(Family::kinds)>>> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = Family::kinds[i].kind;
  return out;
}

/**
 * Builds a policy of `Family` from JSON: a kind's name (`"beats_mean"`, its
 * default parameters) or `{"<kind>": {params}}`. `pointer` is where the
 * config sits in its document (`"/pool"` in an engine config), so that every
 * error's `where` is the JSON pointer of the value at fault: an unknown kind
 * (with the nearest known one), an unknown parameter, a value out of range.
 * A family may accept sibling keys beside the kind (`Family::extra_keys`) and
 * finish the built policy with them (`Family::finish`, e.g. a trigger's
 * `"gate"`).
 */
template <class Family>
expected<typename Family::any, error> make(const nlohmann::json& j, std::string_view pointer = "", int depth = 0) {
  static constexpr auto known = kinds_of<Family>();
  auto cfg = [&] {
    if constexpr (requires { Family::extra_keys; })
      return detail::split_config(j, pointer, Family::name, known, Family::extra_keys);
    else return detail::split_config(j, pointer, Family::name, known);
  }();
  if (!cfg) return unexpected(cfg.error());
  // The kind's parameters: inside the object, or none for a bare name.
  const std::string at = j.is_object() ? fmt::format("{}/{}", pointer, detail::pointer_token(cfg->kind)) : std::string(pointer);
  const auto row = std::find_if(Family::kinds.begin(), Family::kinds.end(), [&](const auto& b) { return b.kind == cfg->kind; });
  if (row == Family::kinds.end())
    return unexpected(detail::json_error(
        "", at, detail::unknown_name_problem(fmt::format("{} kind", Family::name), cfg->kind, known, "known")));
  auto built = row->build(*cfg->body, at, depth);
  if constexpr (requires { Family::finish(j, std::move(*built), pointer); }) {
    if (!built) return built;
    return Family::finish(j, std::move(*built), pointer);
  } else {
    return built;
  }
}

}  // namespace policy

namespace detail {
template <class Family, class Composite>
expected<typename Family::any, error> build_any_of(const nlohmann::json& body, std::string_view pointer, int depth) {
  using any = typename Family::any;
  if (auto ok = check_policy_depth(depth + 1, pointer); !ok) return unexpected(ok.error());
  if (!body.is_array() || body.empty())
    return unexpected(must_be(pointer, fmt::format("a non-empty array of {} configs", Family::name), body));
  std::vector<any> members;
  for (std::size_t i = 0; i < body.size(); ++i) {
    auto m = policy::make<Family>(body[i], fmt::format("{}/{}", pointer, i), depth + 1);
    if (!m) return unexpected(std::move(m.error()));
    members.push_back(std::move(*m));
  }
  return any(Composite(std::move(members)));
}
}  // namespace detail

namespace policy {

template <class Family, class Composite>
constexpr builder<typename Family::any> any_of_builder(std::string_view kind) {
  return {kind, &detail::build_any_of<Family, Composite>};
}

}  // namespace policy

SPECGEN_END_NAMESPACE
