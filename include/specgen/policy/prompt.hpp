#pragma once
/// The prompt builder family: renders a strategy's choice of kernels and
/// feedback (`prompt_content`, prompt.hpp) into the prompt text, and gives the
/// system prompt (the output contract the extraction relies on). The built-in
/// builder is `default_prompt_builder` (prompt.hpp); a host may set its own in code.
///
/// @code
///   specgen::policy::any_prompt_builder b = specgen::policy::default_prompt_builder{{.log_lines = 20}};
///   auto from_json = specgen::policy::make_prompt_builder(nlohmann::json::parse(R"({"default": {"log_lines": 20}})"));
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/family.hpp>
#include <specgen/prompt.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

SPECGEN_BEGIN_NAMESPACE

namespace policy {

/// A prompt builder: renders a strategy's choice into the prompt text, and
/// gives the system prompt (the output contract the extraction relies on).
template <class B>
concept prompt_builder = requires(const B& b, const prompt_content& c) {
  { b.build(c) } -> std::same_as<std::string>;
  { b.system() } -> std::same_as<std::string>;
  { b.name() } -> std::convertible_to<std::string>;
} && std::copy_constructible<B>;  // members first: `expected<any_prompt_builder>` is no builder, without recursing

/// How `any_prompt_builder` forwards the family's calls.
struct prompt_interface {
  struct calls {
    virtual ~calls() = default;
    virtual std::string build(const prompt_content&) const = 0;
    virtual std::string system() const = 0;
  };
  template <class Base, class T>
  struct impl : detail::policy_holder<Base, T> {
    using detail::policy_holder<Base, T>::policy_holder;
    std::string build(const prompt_content& c) const override { return this->value.build(c); }
    std::string system() const override { return this->value.system(); }
  };
};

/// Type-erased prompt builder, so a config picks one at run time. Builders
/// are immutable: copies share one instance. `config()` is
/// `{"default": {...}}` for the default builder, `{"custom": name}` for a host's own.
class any_prompt_builder : public basic_any<prompt_interface, ownership::shared> {
 public:
  template <prompt_builder B>
    requires(!std::derived_from<std::remove_cvref_t<B>, any_prompt_builder>)
  any_prompt_builder(B b) : basic_any(std::move(b)) {}  // NOLINT implicit by design
  any_prompt_builder() : any_prompt_builder(default_prompt_builder{}) {}

  [[nodiscard]] std::string build(const prompt_content& c) const { return self().build(c); }
  [[nodiscard]] std::string system() const { return self().system(); }
};

static_assert(prompt_builder<default_prompt_builder>);
static_assert(prompt_builder<any_prompt_builder>);

/// The prompt family: its name in configs and its kinds (a host's own builder is set in code).
struct prompt_family {
  using any = any_prompt_builder;
  static constexpr std::string_view name = "prompt";
  static constexpr std::array<builder<any_prompt_builder>, 1> kinds{{from_params<any_prompt_builder, default_prompt_builder>("default")}};
};

/// A prompt builder from JSON: `"default"` or `{"default": {"log_lines": 20, "max_feedback_kernels": 12}}`.
inline expected<any_prompt_builder, error> make_prompt_builder(const nlohmann::json& j) { return make<prompt_family>(j); }

}  // namespace policy

SPECGEN_END_NAMESPACE
