// Model-family presets and the configuration's checks.
#include "config.hpp"

#include "redact.hpp"
#include "wire.hpp"

#include <specgen/policy/fields.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace openai {

std::string ascii_lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {

template <std::size_t N>
bool one_of(std::string_view v, const std::array<std::string_view, N>& options) {
  return std::find(options.begin(), options.end(), v) != options.end();
}

constexpr std::array<std::string_view, 4> server_kinds{"auto", "vllm", "sglang", "openai"};
constexpr std::array<std::string_view, 3> fork_prompts{"auto", "token_ids", "text"};
/// Below this even a model list or one chunk would not fit.
constexpr std::uint64_t min_byte_limit = 1024;

/// What is wrong with one server's address, its name left out ("is empty: ...",
/// "\"http://h?x\" has a query ..."); "" when nothing is.
std::string url_problem(std::string_view url) {
  if (detail::has_control_char(url))
    return "contains a control character (CR, LF or another byte below 0x20, or DEL); it would corrupt the HTTP request";
  const std::string shown = redact_url(url);
  if (url.empty()) return "is empty: give the server's address, e.g. http://127.0.0.1:8000";
  if (!url.starts_with("http://") && !url.starts_with("https://"))
    return fmt::format("\"{}\" must start with http:// or https://", shown);
  if (url.find_first_not_of('/', url.find("//") + 2) == std::string_view::npos) return fmt::format("\"{}\" has no host", shown);
  if (url.find_first_of("?#") != std::string_view::npos)
    return fmt::format("\"{}\" has a query or a fragment: give the server root, the backend appends paths to it", shown);
  return {};
}

/// The first bad entry of `base_urls`: its JSON pointer and what is wrong.
std::optional<std::pair<std::string, std::string>> bad_server(const std::vector<std::string>& urls) {
  for (std::size_t i = 0; i < urls.size(); ++i) {
    if (auto why = url_problem(urls[i]); !why.empty()) return std::pair{fmt::format("/base_urls/{}", i), why};
    for (std::size_t k = 0; k < i; ++k)
      if (normalized_base_url(urls[k]) == normalized_base_url(urls[i]))
        return std::pair{fmt::format("/base_urls/{}", i),
                         fmt::format("\"{}\" is listed twice (also /base_urls/{})", redact_url(urls[i]), k)};
  }
  return std::nullopt;
}

std::vector<model_preset> make_presets() {
  const nlohmann::json enable_thinking = {{"chat_template_kwargs", {{"enable_thinking", true}}}};
  std::vector<model_preset> v;
  // DeepSeek-R1 (0528 template): the generation prompt already ends with "<think>\n".
  v.push_back({.name = "deepseek-r1",
               .match = {"deepseek-r1", "deepseek-reasoner"},
               .think_open = "",
               .think_close = "</think>",
               .answer_cue = model_preset{}.answer_cue,
               .reasoning_options = nlohmann::json::object(),
               .prompt_template = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>{system}"
                                  "<\xEF\xBD\x9CUser\xEF\xBD\x9C>{prompt}<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>\n"});
  // DeepSeek-V3.1 and later: hybrid; the template's "thinking" switch ends the prompt with "<think>".
  v.push_back({.name = "deepseek-v3",
               .match = {"deepseek-v3", "deepseek-chat"},
               .think_open = "",
               .think_close = "</think>",
               .answer_cue = model_preset{}.answer_cue,
               .reasoning_options = {{"chat_template_kwargs", {{"thinking", true}}}},
               .prompt_template = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>{system}"
                                  "<\xEF\xBD\x9CUser\xEF\xBD\x9C>{prompt}<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>"});
  // Qwen3 (hybrid thinking): the model writes "<think>" itself.
  v.push_back({.name = "qwen3",
               .match = {"qwen3"},
               .think_open = "<think>",
               .think_close = "</think>",
               .answer_cue = model_preset{}.answer_cue,
               .reasoning_options = enable_thinking,
               .prompt_template = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n"
                                  "<|im_start|>assistant\n"});
  // GLM-4.5, 4.6, 4.7 and GLM-5: the model writes "<think>" itself.
  v.push_back({.name = "glm-4.5",
               .match = {"glm-4.5", "glm-4.6", "glm-4.7", "glm-5"},
               .think_open = "<think>",
               .think_close = "</think>",
               .answer_cue = model_preset{}.answer_cue,
               .reasoning_options = enable_thinking,
               .prompt_template = "[gMASK]<sop><|system|>\n{system}<|user|>\n{prompt}<|assistant|>"});
  v.push_back(model_preset{});
  return v;
}

}  // namespace

std::string model_preset::invalid() const {
  if (name.empty()) return "name is empty";
  if (think_close.empty()) return "think_close is empty: a fork must end the reasoning before it answers";
  if (prompt_template.find("{prompt}") == std::string::npos) return "prompt_template has no {prompt}";
  return {};
}

const std::vector<model_preset>& builtin_presets() {
  static const std::vector<model_preset> presets = make_presets();
  return presets;
}

expected<model_preset, error> find_preset(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& p : builtin_presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  return unexpected(error{fmt::format("unknown preset \"{}\" (known: auto, {})", name, fmt::join(names, ", "))});
}

const model_preset& preset_for_model(std::string_view model) {
  const std::string m = ascii_lowercase(model);
  const auto& all = builtin_presets();
  for (const auto& p : all)
    for (const auto& s : p.match)
      if (m.find(s) != std::string::npos) return p;
  return all.back();  // generic
}

std::string openai_config::invalid() const {
  // Values that reach a request line or a header: a CR or LF in them would
  // start a header of its own. The value is not shown, it may hold a secret.
  for (const auto& [name, value] : {std::pair<std::string_view, std::string_view>{"base_url", base_url}, {"model", model},
                                    {"abort_path", abort_path}, {"api_key_env", api_key_env}})
    if (detail::has_control_char(value))
      return fmt::format("{} contains a control character (CR, LF or another byte below 0x20, or DEL); "
                         "it would corrupt the HTTP request", name);
  if (!base_urls.empty()) {
    if (!base_url.empty()) return "give base_url (one server) or base_urls (several), not both";
    if (auto bad = bad_server(base_urls)) return fmt::format("{}: {}", bad->first, bad->second);
  } else if (auto why = url_problem(base_url); !why.empty()) {
    return base_url.empty() ? "base_url " + why + " (or several in base_urls)" : "base_url " + why;
  }
  if (model.empty()) return "model is empty: give the served model name (GET /v1/models lists them)";
  if (!one_of(server, server_kinds)) return fmt::format("server \"{}\" is not one of auto, vllm, sglang, openai", server);
  if (server == "auto" && !probe) return "server \"auto\" is found by the probe: set probe, or name the server (vllm, sglang, openai)";
  if (!one_of(fork_prompt, fork_prompts)) return fmt::format("fork_prompt \"{}\" is not one of auto, token_ids, text", fork_prompt);
  if (fork_prompt == "token_ids" && !probe) return "fork_prompt \"token_ids\" needs probe (the fork suffix is tokenized by the server)";
  if (!(connect_timeout_s > 0) || !(response_timeout_s > 0) || !(idle_timeout_s > 0))
    return "connect_timeout_s, response_timeout_s and idle_timeout_s must be > 0";
  for (const auto& [name, value] : {std::pair<std::string_view, std::uint64_t>{"max_event_bytes", max_event_bytes},
                                    {"max_response_bytes", max_response_bytes}, {"max_stream_bytes", max_stream_bytes}})
    if (value < min_byte_limit) return fmt::format("{} must be >= {} (the size of a small answer)", name, min_byte_limit);
  if (max_streams < 1) return "max_streams must be >= 1";
  if (max_retries < 0) return "max_retries must be >= 0";
  if (!(instance_probe_s > 0)) return "instance_probe_s must be > 0";
  if (!(retry_initial_s > 0) || retry_max_s < retry_initial_s) return "need 0 < retry_initial_s <= retry_max_s";
  if (fork_max_tokens < 1) return "fork_max_tokens must be >= 1";
  if (fork_tail_tokens < 0) return "fork_tail_tokens must be >= 0";
  if (!abort_path.empty() && abort_path.front() != '/') return fmt::format("abort_path \"{}\" must start with /", abort_path);
  if (auto f = resolve_family(*this); !f) return f.error().what();
  return {};
}

std::vector<std::string> openai_config::servers() const { return base_urls.empty() ? std::vector{base_url} : base_urls; }

expected<openai_config, error> config_from_json(const nlohmann::json& j) {
  // A bad server entry is named by its own pointer, not the object's.
  if (j.is_object() && j.contains("base_urls") && j["base_urls"].is_array()) {
    const auto& a = j["base_urls"];
    std::vector<std::string> urls;
    for (const auto& e : a)
      if (e.is_string()) urls.push_back(e.get<std::string>());
    if (urls.size() == a.size())
      if (auto bad = bad_server(urls))
        return unexpected(error{.message = bad->second, .where = bad->first});
  }
  return specgen::detail::read_fields<openai_config>(j, "");
}

nlohmann::json to_json(const openai_config& c) { return specgen::detail::write_fields(c); }

expected<model_preset, error> resolve_family(const openai_config& c) {
  const auto base = c.preset == "auto" ? expected<model_preset, error>(preset_for_model(c.model)) : find_preset(c.preset);
  return base.and_then([&](const model_preset& b) { return specgen::detail::read_fields<model_preset>(c.family, "/family", b); });
}

std::string normalized_base_url(std::string_view url) {
  std::string u(url);
  while (!u.empty() && u.back() == '/') u.pop_back();
  if (u.ends_with("/v1")) u.resize(u.size() - 3);
  return u;
}

}  // namespace openai
SPECGEN_END_NAMESPACE
