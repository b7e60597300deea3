// The loop side of the backend: what the engine calls, and the deliveries
// the I/O thread posts back. Every member here is touched on the loop's
// thread only, except the counters (atomics) and `client_` (thread-safe).
#include "config.hpp"
#include "http.hpp"
#include "redact.hpp"
#include "wire.hpp"

#include <specgen/backend/openai.hpp>
#include <specgen/detail/json_fields.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <utility>
#include <unordered_map>

SPECGEN_BEGIN_NAMESPACE
namespace openai {

namespace {

using detail::delivery_batch;

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

std::uint64_t chunk_tokens(const stream_chunk& c) {
  return c.tokens.empty() ? std::max<std::uint64_t>(c.token_count, 1) : c.tokens.size();
}

/// The ids of `text`, tokenized by the server without special tokens added.
expected<std::vector<token_id>, error> tokenize(detail::http_client& client, int origin, const detail::dialect& d,
                                                const std::string& model, const std::string& text) {
  const nlohmann::json body = {{"model", model}, {"prompt", text}, {"add_special_tokens", false}};
  const detail::plain_result r = client.request_sync(origin, "POST", d.tokenize_path, body.dump());
  if (r.status != 200)
    return unexpected(error{fmt::format("POST {} answered {}", d.tokenize_path,
                                        r.status ? fmt::format("HTTP {}: {}", r.status, detail::error_message_of(r.body)) : r.error)});
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return unexpected(error{fmt::format("POST {} answered something other than a JSON object", d.tokenize_path)});
  try {  // open, like the wire: only "tokens" is read
    return specgen::detail::required_key<std::vector<token_id>>(j, "tokens");
  } catch (const specgen::detail::json_read_error& e) {  // "POST /tokenize answered /tokens/2: expected an integer ..."
    return unexpected(error{fmt::format("POST {} answered {}", d.tokenize_path, e.what())});
  }
}

/// The model names an OpenAI model list holds, and the `owned_by` of `model`;
/// nullopt when `body` is not a model list.
std::optional<std::pair<std::vector<std::string>, std::string>> model_list(const std::string& body, const std::string& model) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array()) return std::nullopt;
  std::pair<std::vector<std::string>, std::string> out;
  for (const auto& e : j["data"]) {
    if (!e.is_object() || !e.contains("id") || !e["id"].is_string()) continue;
    out.first.push_back(e["id"].get<std::string>());
    if (out.first.back() == model && e.contains("owned_by") && e["owned_by"].is_string()) out.second = e["owned_by"].get<std::string>();
  }
  return out;
}

}  // namespace

struct openai_backend::impl {
  /// One request in flight (a main stream or a fork), until its last sample ends.
  struct request {
    stream_sink* sink = nullptr;
    bool fork = false;
    std::vector<bool> ended;
    std::vector<std::uint64_t> tokens;  ///< delivered per sample
    int open = 0;
    // Main streams: what a fork from them is built of.
    std::string system, prompt;
    std::string reasoning;             ///< reasoning text delivered
    std::vector<token_id> ids;         ///< reasoning ids delivered
    std::optional<std::vector<token_id>> prompt_ids;
    bool ids_broken = false;
    int instance = 0;  ///< the server it runs on
  };

  executor& exec;
  openai_config cfg;
  detail::scrubber scrub;     ///< every message to the engine passes through it
  detail::dialect dialect{};  ///< set once the server kind is known
  server_info info;
  std::string rid_prefix;
  std::unordered_map<stream_id, request> requests;
  std::vector<instance_stats> instances;  ///< per server, in configuration order
  /// Main streams that ended with an error, with several servers, and the
  /// server they ran on: a fork from one whose server is out of rotation says so.
  std::unordered_map<stream_id, int> lost;
  stream_id next_id = 0;
  int in_flight = 0;
  std::atomic<std::uint64_t> reasoning_streams{0}, forks{0}, forks_token_ids{0}, forks_text{0}, fork_prompt_tokens{0},
      fork_cached_tokens{0}, fork_usage_reports{0}, chunks{0}, stream_errors{0}, cancels{0};
  /// Queued deliveries check this before touching the backend: it is gone when they run late.
  std::shared_ptr<int> alive = std::make_shared<int>(0);
  std::unique_ptr<detail::http_client> client;  // last: its thread stops first

  impl(executor& e, openai_config c, detail::client_options o, detail::scrubber s)
      : exec(e), cfg(std::move(c)), scrub(std::move(s)) {
    for (const auto& url : o.base_urls) instances.push_back({.base_url = redact_url(url)});
    rid_prefix = fmt::format("specgen-{:x}-{:x}", static_cast<unsigned>(::getpid()),
                             static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) & 0xffffffu);
    // A server out of rotation rejoins once its model list names the model again.
    auto serves = [model = cfg.model](const detail::plain_result& r) {
      if (r.status != 200) return false;
      const auto list = model_list(r.body, model);
      return list && std::find(list->first.begin(), list->first.end(), model) != list->first.end();
    };
    client = std::make_unique<detail::http_client>(
        std::move(o),
        [this, w = std::weak_ptr<int>(alive)](delivery_batch&& b) {
          exec.post([this, w, b = std::move(b)]() mutable {
            if (w.lock()) deliver(b);
          });
        },
        std::move(serves));
  }

  ~impl() {
    client.reset();  // no delivery is posted after this
    alive.reset();
  }

  [[nodiscard]] error refusal(std::string_view message, bool retryable) const {
    return error{.message = scrub.clean(message), .retryable = retryable};
  }

  [[nodiscard]] detail::abort_request abort_of(const std::string& rid) const {
    if (dialect.abort_path.empty()) return {};
    return {.path = dialect.abort_path, .body = nlohmann::json{{"rid", rid}}.dump()};
  }

  expected<void, error> capacity() const {
    if (in_flight >= cfg.max_streams)
      return unexpected(refusal(fmt::format("openai: {} requests in flight (max_streams); retry when one ends", in_flight), true));
    return {};
  }

  /// The server in rotation with the fewest active sequences (the first in
  /// configuration order among equals).
  expected<int, error> least_loaded() const {
    int best = -1;
    for (std::size_t i = 0; i < instances.size(); ++i)
      if (instances[i].in_rotation && (best < 0 || instances[i].active < instances[static_cast<std::size_t>(best)].active))
        best = static_cast<int>(i);
    if (best >= 0) return best;
    std::vector<std::string> why;
    for (const auto& in : instances) why.push_back(fmt::format("{} ({})", in.base_url, in.out_reason));
    return unexpected(refusal(fmt::format("openai: no server is in rotation: {}; each is asked every {} s (instance_probe_s) "
                                          "whether it serves again",
                                          fmt::join(why, "; "), cfg.instance_probe_s),
                              true));
  }

  stream_id add(stream_sink& sink, bool fork, int samples, int instance) {
    const stream_id id = ++next_id;
    request& r = requests[id];
    r.sink = &sink;
    r.fork = fork;
    r.instance = instance;
    instances[static_cast<std::size_t>(instance)].active += samples;
    ++(fork ? instances[static_cast<std::size_t>(instance)].forks : instances[static_cast<std::size_t>(instance)].reasoning_streams);
    r.ended.assign(static_cast<std::size_t>(samples), false);
    r.tokens.assign(static_cast<std::size_t>(samples), 0);
    r.open = samples;
    ++in_flight;
    return id;
  }

  expected<stream_id, error> start_reasoning(const reasoning_request& q, stream_sink& sink) {
    if (auto full = capacity(); !full) return unexpected(full.error());
    const auto where = least_loaded();
    if (!where) return unexpected(where.error());
    const stream_id id = add(sink, false, 1, *where);
    request& r = requests[id];
    r.system = q.system;
    r.prompt = q.prompt;
    const std::string rid = fmt::format("{}-{}", rid_prefix, id);
    client->start_stream(*where, id, "/v1/chat/completions", detail::chat_body(dialect, cfg.model, info.family, q, rid), rid,
                         abort_of(rid), detail::make_main_decoder(id, info.think_open, cfg.max_stream_bytes));
    ++reasoning_streams;
    return id;
  }

  /// Why a fork from `p` cannot carry token ids ("" when it can).
  [[nodiscard]] std::string no_ids_reason(stream_id parent, const request& p) const {
    if (!info.token_ids_note.empty()) return info.token_ids_note;
    if (!p.prompt_ids)
      return fmt::format("the server sent no prompt token ids for stream {} (vLLM sends them with return_token_ids "
                         "from 0.10.2 on; SGLang does not stream them)", parent);
    if (p.ids_broken) return fmt::format("the server skipped reasoning tokens of stream {}, so its ids are not a prefix", parent);
    return {};
  }

  expected<stream_id, error> fork(const fork_request& f, stream_sink& sink) {
    if (auto full = capacity(); !full) return unexpected(full.error());
    if (f.samples < 1) return unexpected(refusal(fmt::format("openai: a fork needs samples >= 1, got {}", f.samples), false));
    auto pit = requests.find(f.parent);
    // The parent's server is out of rotation: the parent ended (or is ending) with it.
    std::optional<int> gone_server;
    if (pit != requests.end() && !instances[static_cast<std::size_t>(pit->second.instance)].in_rotation)
      gone_server = pit->second.instance;
    else if (auto l = lost.find(f.parent); pit == requests.end() && l != lost.end() &&
                                           !instances[static_cast<std::size_t>(l->second)].in_rotation)
      gone_server = l->second;
    if (gone_server) {
      const instance_stats& in = instances[static_cast<std::size_t>(*gone_server)];
      return unexpected(refusal(fmt::format("openai: fork parent {} ran on {}, which is out of rotation ({}); a fork runs "
                                            "only on its parent's server, where the prefix is cached",
                                            f.parent, in.base_url, in.out_reason),
                                false));
    }
    if (pit == requests.end() || pit->second.fork)
      return unexpected(refusal(fmt::format("openai: fork parent {} is not a running reasoning stream of this backend", f.parent), false));
    const request& p = pit->second;
    const auto& prefix = f.reasoning_prefix;
    if (prefix.size() > p.ids.size() || !std::equal(prefix.begin(), prefix.end(), p.ids.begin())) {
      const auto at = std::mismatch(prefix.begin(), prefix.end(), p.ids.begin(), p.ids.end()).first - prefix.begin();
      return unexpected(refusal(fmt::format("openai: fork prefix ({} ids) differs from the {} reasoning ids stream {} "
                                            "delivered, at token {}; a fork must carry the exact ids received",
                                            prefix.size(), p.ids.size(), f.parent, at), false));
    }
    detail::fork_prompt fp;
    const std::string why_text = no_ids_reason(f.parent, p);
    if (cfg.fork_prompt == "token_ids" && !why_text.empty())
      return unexpected(refusal("openai: fork_prompt is \"token_ids\" but " + why_text, false));
    if (cfg.fork_prompt == "text" || !why_text.empty()) {
      fp.is_text = true;
      fp.text = detail::render_fork_text(info.family, p.system, p.prompt, p.reasoning);
    } else {
      fp.ids.reserve(p.prompt_ids->size() + prefix.size() + info.fork_suffix.size());
      fp.ids.insert(fp.ids.end(), p.prompt_ids->begin(), p.prompt_ids->end());
      fp.ids.insert(fp.ids.end(), prefix.begin(), prefix.end());
      fp.ids.insert(fp.ids.end(), info.fork_suffix.begin(), info.fork_suffix.end());
    }
    // Where the parent runs: that server holds the prefix in its cache. It is
    // in rotation (its streams end when it leaves).
    const int instance = p.instance;
    const stream_id id = add(sink, true, f.samples, instance);
    const std::string rid = fmt::format("{}-{}", rid_prefix, id);
    const int max_tokens = std::max(1, std::min(f.params.max_tokens, cfg.fork_max_tokens));
    client->start_stream(instance, id, "/v1/completions",
                         detail::completion_body(dialect, cfg.model, fp, f.samples, f.params, max_tokens, f.ctx.seed, rid), rid,
                         abort_of(rid),
                         detail::make_fork_decoder(id, {.samples = f.samples, .stop_at_closing_fence = cfg.stop_at_closing_fence,
                                                        .tail_tokens = cfg.fork_tail_tokens, .max_bytes = cfg.max_stream_bytes}));
    ++forks;
    ++(fp.is_text ? forks_text : forks_token_ids);
    return id;
  }

  void cancel(stream_id id) {
    auto it = requests.find(id);
    if (it == requests.end()) return;
    request& r = it->second;
    std::vector<stream_end> ends;
    for (std::size_t i = 0; i < r.ended.size(); ++i) {
      if (r.ended[i]) continue;
      usage u;
      u.completion_tokens = r.tokens[i];
      if (!r.fork) {
        u.prompt_tokens = r.prompt_ids ? r.prompt_ids->size() : 0;
        u.reasoning_tokens = r.ids.empty() ? 0 : r.ids.size();
      }
      ends.push_back(stream_end{.id = id, .sample = static_cast<int>(i), .reason = finish_reason::cancelled, .used = u, .error = {}});
    }
    stream_sink* sink = r.sink;
    instances[static_cast<std::size_t>(r.instance)].active -= r.open;
    requests.erase(it);
    --in_flight;
    ++cancels;
    client->cancel(id);
    // Delivered from the loop, never from inside cancel().
    exec.post([w = std::weak_ptr<int>(alive), sink, ends = std::move(ends)] {
      if (w.lock())
        for (const auto& e : ends) sink->on_end(e);
    });
  }

  void deliver(delivery_batch& batch) {
    for (auto& d : batch)
      std::visit(overloaded{[this](stream_chunk& c) { on_chunk(c); }, [this](stream_end& e) { on_end(e); },
                            [this](detail::stream_meta& m) { on_meta(m); },
                            [this](detail::instance_event& v) { on_instance(v); }},
                 d);
  }

  void on_chunk(stream_chunk& c) {
    auto it = requests.find(c.id);
    if (it == requests.end()) return;  // cancelled: late chunks are dropped
    request& r = it->second;
    const auto k = static_cast<std::size_t>(c.sample);
    if (k >= r.ended.size() || r.ended[k]) return;
    r.tokens[k] += chunk_tokens(c);
    if (!r.fork && c.reasoning) {
      r.reasoning += c.text;
      r.ids.insert(r.ids.end(), c.tokens.begin(), c.tokens.end());
    }
    ++chunks;
    r.sink->on_chunk(c);  // may cancel this stream or fork from it: `r` is not used after this
  }

  void on_end(stream_end& e) {
    auto it = requests.find(e.id);
    if (it == requests.end()) return;
    request& r = it->second;
    const auto k = static_cast<std::size_t>(e.sample);
    if (k >= r.ended.size() || r.ended[k]) return;
    r.ended[k] = true;
    --instances[static_cast<std::size_t>(r.instance)].active;
    stream_sink* sink = r.sink;
    if (r.fork && e.used.prompt_tokens > 0) {
      fork_prompt_tokens += e.used.prompt_tokens;
      fork_cached_tokens += e.used.cached_prompt_tokens;
      ++fork_usage_reports;
    }
    if (e.reason == finish_reason::error) {
      ++stream_errors;
      // The message may quote the server: no secret, no control character reaches the journal.
      e.error = scrub.clean(e.error);
    }
    if (--r.open == 0) {
      if (!r.fork && e.reason == finish_reason::error && instances.size() > 1) lost[e.id] = r.instance;
      requests.erase(it);
      --in_flight;
    }
    sink->on_end(e);
  }

  /// A server left the rotation (its streams end here, with why) or rejoined it.
  void on_instance(detail::instance_event& v) {
    instance_stats& in = instances.at(static_cast<std::size_t>(v.instance));
    if (v.up) {
      in.in_rotation = true;
      in.out_reason.clear();
      return;
    }
    if (!in.in_rotation) return;
    in.in_rotation = false;
    in.out_reason = scrub.clean(v.why);
    ++in.times_out;
    const std::string why = fmt::format("openai: server {} left the rotation: {}", in.base_url, in.out_reason);
    std::vector<stream_id> gone;
    for (const auto& [id, r] : requests)
      if (r.instance == v.instance) gone.push_back(id);
    std::sort(gone.begin(), gone.end());
    for (stream_id id : gone) {
      auto it = requests.find(id);
      if (it == requests.end()) continue;  // a sink's on_end cancelled it
      request& r = it->second;
      client->cancel(id);
      for (std::size_t k = 0; k < r.ended.size(); ++k) {
        auto again = requests.find(id);
        if (again == requests.end()) break;  // a sink cancelled it
        if (again->second.ended[k]) continue;
        stream_end e{.id = id, .sample = static_cast<int>(k), .reason = finish_reason::error, .used = {}, .error = why};
        e.used.completion_tokens = again->second.tokens[k];
        on_end(e);
      }
    }
  }

  void on_meta(detail::stream_meta& m) {
    auto it = requests.find(m.id);
    if (it == requests.end()) return;
    if (m.prompt_ids) it->second.prompt_ids = std::move(m.prompt_ids);
    if (m.ids_broken) it->second.ids_broken = true;
  }
};

openai_backend::openai_backend(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
openai_backend::~openai_backend() = default;

expected<std::unique_ptr<openai_backend>, error> openai_backend::create(executor& loop, openai_config config) {
  if (auto why = config.invalid(); !why.empty()) return unexpected(error{"openai backend: " + why});
  if (loop.is_virtual())
    return unexpected(error{"openai backend: it talks to a real server, so it needs a real-time loop (event_loop<steady_clock>)"});
  if (!config.base_url.empty()) config.base_url = normalized_base_url(config.base_url);
  for (auto& url : config.base_urls) url = normalized_base_url(url);
  const std::vector<std::string> urls = config.servers();
  const bool several = urls.size() > 1;
  detail::client_options o{.base_urls = urls, .headers = {}, .connect_timeout_s = config.connect_timeout_s,
                           .response_timeout_s = config.response_timeout_s, .idle_timeout_s = config.idle_timeout_s,
                           .max_retries = config.max_retries, .retry_initial_s = config.retry_initial_s,
                           .retry_max_s = config.retry_max_s, .max_event_bytes = config.max_event_bytes,
                           .max_response_bytes = config.max_response_bytes, .instance_probe_s = config.instance_probe_s};
  std::string key;
  if (!config.api_key_env.empty()) {
    const char* k = std::getenv(config.api_key_env.c_str());
    if (!k || !*k)
      return unexpected(error{fmt::format("openai backend: api_key_env names ${}, which is not set (or empty)", config.api_key_env)});
    key = k;
    // A CR or LF in the key would end the Authorization header and start one
    // of the key's choosing. The message names the variable, never its value.
    if (detail::has_control_char(key))
      return unexpected(error{fmt::format("openai backend: the API key in ${} contains a control character (CR, LF or "
                                          "another byte below 0x20, or DEL), which would corrupt the request's headers; "
                                          "check the variable's value (a trailing newline from a key file, for example)",
                                          config.api_key_env)});
    o.headers.push_back("Authorization: Bearer " + key);
  }
  auto family = resolve_family(config);
  if (!family) return unexpected(error{"openai backend: " + family.error().message});

  detail::scrubber scrub(urls.front(), key);
  for (const auto& url : urls) scrub.add_url(url);
  auto fail = [&](std::string_view message) { return unexpected(error{scrub.clean(message)}); };

  // The client runs before the server kind is known: the probe needs it.
  auto p = std::make_unique<impl>(loop, config, std::move(o), scrub);
  impl& m = *p;
  m.info.family = std::move(*family);
  m.info.base_url = redact_url(urls.front());
  int first = 0;  ///< the server whose kind and tokenizer the backend uses: the first that answered

  if (config.probe) {
    // Every server is asked. With several, one that cannot be reached (or
    // answers 5xx) is left out, and rejoins when it answers; any other
    // problem is the configuration's, and fails here.
    first = -1;
    std::string kind;  ///< what the first server's owned_by makes of "auto"
    for (std::size_t i = 0; i < urls.size(); ++i) {
      const std::string shown = redact_url(urls[i]);
      const detail::plain_result r = m.client->request_sync(static_cast<int>(i), "GET", "/v1/models", "");
      if (several && (r.status == 0 || (r.status >= 500 && r.status <= 599))) {
        std::string why = r.status == 0 ? fmt::format("cannot reach {}: {}", shown, r.error)
                                        : fmt::format("GET {}/v1/models answered HTTP {}: {}", shown, r.status,
                                                      detail::error_message_of(r.body));
        why = scrub.clean(why);
        m.info.left_out.push_back(why);
        m.instances[i].in_rotation = false;
        m.instances[i].out_reason = why;
        m.client->set_down(static_cast<int>(i));
        continue;
      }
      if (r.status == 0) return fail(fmt::format("openai backend: cannot reach {}: {}", shown, r.error));
      if (r.status == 401 || r.status == 403)
        return fail(fmt::format("openai backend: {} refused the API key (HTTP {}{}): {}", shown, r.status,
                                config.api_key_env.empty() ? "; no key was sent, set api_key_env" : "",
                                detail::error_message_of(r.body)));
      if (r.status != 200)
        return fail(fmt::format("openai backend: GET {}/v1/models answered HTTP {}: {}", shown, r.status,
                                detail::error_message_of(r.body)));
      auto list = model_list(r.body, config.model);
      if (!list) return fail(fmt::format("openai backend: GET {}/v1/models is not an OpenAI model list", shown));
      auto& [models, owner] = *list;
      if (std::find(models.begin(), models.end(), config.model) == models.end())
        return fail(fmt::format("openai backend: {} does not serve \"{}\"; it serves: {}", shown, config.model,
                                models.empty() ? "nothing" : fmt::format("\"{}\"", fmt::join(models, "\", \""))));
      const std::string its_kind = owner == "vllm" || owner == "sglang" ? owner : "openai";
      if (first < 0) {
        first = static_cast<int>(i);
        kind = its_kind;
        m.info.models = std::move(models);
        m.info.base_url = shown;
      } else if (config.server == "auto" && its_kind != kind) {
        return fail(fmt::format("openai backend: {} is a \"{}\" server and {} a \"{}\" one; all servers of one backend "
                                "must be of one kind (or name it in \"server\")",
                                m.info.base_url, kind, shown, its_kind));
      }
    }
    if (first < 0)
      return fail(fmt::format("openai backend: none of the {} servers can be reached: {}", urls.size(), fmt::join(m.info.left_out, "; ")));
    for (auto& name : m.info.models) name = scrub.clean(name);  // the server's words: shown to users
    if (config.server == "auto") m.cfg.server = kind;
  }
  m.dialect = *detail::dialect_of(m.cfg.server);
  if (!config.abort_path.empty()) m.dialect.abort_path = config.abort_path;
  m.info.kind = m.dialect.kind;
  m.cfg.abort_path = m.dialect.abort_path;

  if (config.fork_prompt != "text") {
    if (!m.dialect.chat_token_ids && m.dialect.kind == "sglang") {
      m.info.token_ids_note = "SGLang streams no token ids with a chat completion: it refuses return_token_ids with stream: true";
    } else if (!config.probe) {
      m.info.token_ids_note = "probe is off, so the fork suffix was not tokenized";
    } else if (m.dialect.tokenize_path.empty()) {
      m.info.token_ids_note = fmt::format("a \"{}\" server has no tokenize endpoint, so the fork suffix has no ids", m.dialect.kind);
    } else {
      auto suffix = tokenize(*m.client, first, m.dialect, config.model, m.info.family.think_close + m.info.family.answer_cue);
      expected<std::vector<token_id>, error> open = std::vector<token_id>{};
      if (suffix && !m.info.family.think_open.empty()) open = tokenize(*m.client, first, m.dialect, config.model, m.info.family.think_open);
      if (!suffix || !open) {
        m.info.token_ids_note =
            scrub.clean(fmt::format("the fork suffix could not be tokenized: {}", (!suffix ? suffix : open).error().message));
      } else {
        m.info.fork_suffix = std::move(*suffix);
        m.info.think_open = std::move(*open);
      }
    }
    if (config.fork_prompt == "token_ids" && !m.info.token_ids_note.empty())
      return fail("openai backend: fork_prompt is \"token_ids\" but " + m.info.token_ids_note);
  }
  return std::unique_ptr<openai_backend>(new openai_backend(std::move(p)));
}

backend_limits openai_backend::limits() const noexcept {
  return {.max_concurrent_streams = impl_->cfg.max_streams, .token_ids = impl_->dialect.kind == "vllm", .kv_hooks = false};
}

expected<stream_id, error> openai_backend::start_reasoning(const reasoning_request& r, stream_sink& sink) {
  return impl_->start_reasoning(r, sink);
}

expected<stream_id, error> openai_backend::fork(const fork_request& f, stream_sink& sink) { return impl_->fork(f, sink); }

void openai_backend::cancel(stream_id id) { impl_->cancel(id); }

const openai_config& openai_backend::config() const noexcept { return impl_->cfg; }
const server_info& openai_backend::server() const noexcept { return impl_->info; }

std::vector<instance_stats> openai_backend::instances() const { return impl_->instances; }

backend_stats openai_backend::stats() const {
  const impl& m = *impl_;
  const detail::client_counters c = m.client->counters();
  return {.reasoning_streams = m.reasoning_streams, .forks = m.forks, .forks_token_ids = m.forks_token_ids,
          .forks_text = m.forks_text, .fork_prompt_tokens = m.fork_prompt_tokens, .fork_cached_tokens = m.fork_cached_tokens,
          .fork_usage_reports = m.fork_usage_reports, .chunks = m.chunks, .http_requests = c.http_requests,
          .retries = c.retries, .stream_errors = m.stream_errors, .cancels = m.cancels, .aborts_posted = c.aborts_posted,
          .io_cpu_seconds = m.client->io_cpu_seconds()};
}

}  // namespace openai
SPECGEN_END_NAMESPACE
