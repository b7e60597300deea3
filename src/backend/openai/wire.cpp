#include "wire.hpp"

#include <specgen/detail/json_fields.hpp>
#include <specgen/extract.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

SPECGEN_BEGIN_NAMESPACE
namespace openai::detail {

namespace {

using json = nlohmann::json;
using specgen::detail::json_read_error;
using specgen::detail::nested_in;

// The wire format is deliberately open: an OpenAI-compatible server's events
// and responses carry keys this client does not read, and servers add new
// ones from version to version, so unknown keys are ignored throughout, and a
// key that is absent or null (servers send `"usage": null`, `"content": null`)
// is simply not there. The client reads what it needs with the helpers below
// (json_fields.hpp's): a value of the wrong type throws json_read_error, and
// the decoder ends the stream with its JSON pointer ("the server sent a
// malformed event: /choices/0/delta/content: expected a string, found number
// 5"). Nothing is thrown while the events are well-formed.

/// A string field as a view into the event (no copy), or "" when absent or null.
std::string_view string_at(const json& j, const char* key) {
  const json* v = specgen::detail::present(j, key);
  if (v == nullptr) return {};
  if (!v->is_string()) throw json_read_error(std::string("/") + key, specgen::detail::wrong_type_problem("a string", *v));
  return v->get_ref<const std::string&>();
}

/// A string field of an error report, or "" when absent or not a string: an
/// error is shown however it comes.
std::string_view loose_string_at(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  return it->get_ref<const std::string&>();
}

/// An object field, or nullptr when absent or null.
const json* object_at(const json& j, const char* key) {
  const json* v = specgen::detail::present(j, key);
  if (v != nullptr && !v->is_object())
    throw json_read_error(std::string("/") + key, specgen::detail::wrong_type_problem("an object", *v));
  return v;
}

/// A count (an integer >= 0), or nullopt when absent or null.
std::optional<std::uint64_t> count_at(const json& j, const char* key) {
  std::optional<std::uint64_t> n;
  specgen::detail::read_key(j, key, n);
  return n;
}

/// Token ids in `j[key]`: nullopt when absent or null, an empty optional
/// vector is "present but empty".
std::optional<std::vector<token_id>> ids_at(const json& j, const char* key) {
  std::optional<std::vector<token_id>> ids;
  specgen::detail::read_key(j, key, ids);
  return ids;
}

/// The stream's error for an event with a value of the wrong type.
std::string malformed(const json_read_error& e) { return fmt::format("the server sent a malformed event: {}", e.what()); }

std::string excerpt(std::string_view s, std::size_t n = 120) {
  if (s.size() <= n) return std::string(s);
  return fmt::format("{}... ({} bytes)", s.substr(0, n), s.size());
}

/// The error an event carries, if it is one: vLLM and SGLang send
/// `{"error": {...}}`, older vLLM `{"object": "error", "message": ...}`.
std::optional<std::string> event_error(const json& j) {
  if (auto it = j.find("error"); it != j.end() && !it->is_null()) {
    if (it->is_object()) {
      std::string_view m = loose_string_at(*it, "message");
      return m.empty() ? it->dump() : std::string(m);
    }
    return it->is_string() ? it->get<std::string>() : it->dump();
  }
  if (loose_string_at(j, "object") == "error") {
    std::string_view m = loose_string_at(j, "message");
    return m.empty() ? j.dump() : std::string(m);
  }
  return std::nullopt;
}

/// Usage as the server reports it (OpenAI fields, plus SGLang's top-level reasoning_tokens).
struct usage_report {
  std::optional<std::uint64_t> prompt, cached, completion, reasoning;
};
/// The event's usage object, if any; json_read_error's pointer starts at "/usage".
std::optional<usage_report> read_usage(const json& event) {
  const json* u = object_at(event, "usage");
  if (u == nullptr) return std::nullopt;
  return nested_in("usage", [&] {
    usage_report r;
    r.prompt = count_at(*u, "prompt_tokens");
    r.completion = count_at(*u, "completion_tokens");
    if (const json* d = object_at(*u, "prompt_tokens_details"))
      r.cached = nested_in("prompt_tokens_details", [&] { return count_at(*d, "cached_tokens"); });
    r.reasoning = count_at(*u, "reasoning_tokens");
    if (const json* d = object_at(*u, "completion_tokens_details"); d != nullptr && !r.reasoning)
      r.reasoning = nested_in("completion_tokens_details", [&] { return count_at(*d, "reasoning_tokens"); });
    return r;
  });
}

/// The event's choices: an array, or nullptr when absent or null.
const json* choices_of(const json& event) {
  const json* c = specgen::detail::present(event, "choices");
  if (c != nullptr && !c->is_array())
    throw json_read_error("/choices", specgen::detail::wrong_type_problem("an array", *c));
  return c;
}

/// Choice `c` must be an object.
void check_choice(const json& c) {
  if (!c.is_object()) throw json_read_error({}, specgen::detail::wrong_type_problem("an object", c));
}

/// A finish reason as the engine knows it; `error` for one it does not
/// ("abort" from SGLang, "content_filter").
finish_reason map_finish(std::string_view r) {
  if (r == "stop" || r == "tool_calls" || r == "function_call" || r == "eos") return finish_reason::stop;
  if (r == "length") return finish_reason::length;
  return finish_reason::error;
}

/// The error of a request that delivered more than its byte limit.
std::string too_long(std::uint64_t max_bytes) {
  return fmt::format("the server sent more than max_stream_bytes ({} bytes) of text and token ids for this request; "
                     "raise max_stream_bytes in the backend's configuration if its answers really are this long",
                     max_bytes);
}

/// What a chunk costs the client to hold: its text, and 4 bytes per token id.
std::uint64_t chunk_bytes(const stream_chunk& c) { return c.text.size() + c.tokens.size() * sizeof(token_id); }

class main_decoder final : public stream_decoder {
 public:
  main_decoder(stream_id id, std::vector<token_id> think_open, std::uint64_t max_bytes)
      : id_(id), think_open_(std::move(think_open)), max_bytes_(max_bytes) {}

  void on_event(std::string_view data, delivery_batch& out) override {
    if (ended_) return;
    json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      fail(fmt::format("the server sent a malformed event: {}", excerpt(data)), out);
      return;
    }
    if (auto e = event_error(j)) {
      fail(fmt::format("the server reported an error: {}", excerpt(*e, 300)), out);
      return;
    }
    try {
      event(j, out);
    } catch (const json_read_error& e) {
      fail(malformed(e), out);
    }
  }

  void on_done(delivery_batch& out) override {
    if (ended_) return;
    if (!finish_) {
      fail("the server ended the stream ([DONE]) without a finish reason", out);
      return;
    }
    end(map_finish(*finish_), *finish_ == "stop" || *finish_ == "length" ? "" : fmt::format("the server finished the stream with \"{}\"", excerpt(*finish_)), out);
  }

  void on_eof(delivery_batch& out) override {
    if (ended_) return;
    if (finish_) {
      on_done(out);  // a server that omits [DONE] after a finished choice
      return;
    }
    fail("the server closed the stream before it finished", out);
  }

  void on_failure(std::string_view message, delivery_batch& out) override { fail(message, out); }
  [[nodiscard]] bool committed() const noexcept override { return committed_; }
  [[nodiscard]] bool finished() const noexcept override { return ended_; }
  [[nodiscard]] std::uint64_t progress() const noexcept override { return progress_; }
  void reset() override { *this = main_decoder(id_, std::move(think_open_), max_bytes_); }

 private:
  /// One event that is not an error report.
  void event(const json& j, delivery_batch& out) {
    if (auto p = ids_at(j, "prompt_token_ids")) {
      ++progress_;  // the prompt was read: prefill is done
      out.emplace_back(stream_meta{.id = id_, .prompt_ids = std::move(*p), .ids_broken = false});
    }
    std::optional<std::uint64_t> total;  // cumulative completion tokens (continuous usage)
    if (const auto r = read_usage(j)) {
      total = r->completion;
      // The same report again is a keep-alive, not progress.
      if ((r->prompt && r->prompt != usage_.prompt) || (r->cached && r->cached != usage_.cached) ||
          (r->completion && r->completion != usage_.completion) || (r->reasoning && r->reasoning != usage_.reasoning))
        ++progress_;
      if (r->prompt) usage_.prompt = r->prompt;
      if (r->cached) usage_.cached = r->cached;
      if (r->completion) usage_.completion = r->completion;
      if (r->reasoning) usage_.reasoning = r->reasoning;
    }
    const json* choices = choices_of(j);
    if (choices == nullptr) return;
    for (std::size_t i = 0; i < choices->size(); ++i) {
      const json& c = (*choices)[i];
      try {
        check_choice(c);
        if (auto idx = count_at(c, "index"); idx && *idx != 0) {
          fail(fmt::format("the server sent choice {} of a request for one", *idx), out);
          return;
        }
        choice(c, total, out);
      } catch (json_read_error& e) {
        e.nest(i);
        e.nest("choices");
        throw;
      }
      if (ended_) return;
    }
  }

  void choice(const json& c, std::optional<std::uint64_t> total, delivery_batch& out) {
    std::string_view reasoning;
    std::string_view content;
    if (const json* d = object_at(c, "delta")) {
      nested_in("delta", [&] {
        reasoning = string_at(*d, "reasoning_content");
        if (reasoning.empty()) reasoning = string_at(*d, "reasoning");
        content = string_at(*d, "content");
      });
    }
    std::optional<std::vector<token_id>> ids = ids_at(c, "token_ids");
    const bool answer = !content.empty() && reasoning.empty();  // the first answer chunk may follow an unstreamed close marker
    const bool to_reasoning = !reasoning.empty() || (ids && !ids->empty() && content.empty() && !in_answer_);
    std::uint64_t n = ids ? ids->size() : 0;

    if (ids && total && *total > ids_seen_ + ids->size()) {
      // vLLM's reasoning parsers stream no chunk for a token that is only a
      // think marker; continuous usage shows how many were generated.
      const std::uint64_t skipped = *total - ids_seen_ - ids->size();
      if (ids_seen_ == 0 && to_reasoning && skipped == think_open_.size()) {
        ids->insert(ids->begin(), think_open_.begin(), think_open_.end());
        n = ids->size();
      } else if (!in_answer_ && !answer && !ids_broken_) {
        ids_broken_ = true;
        out.emplace_back(stream_meta{.id = id_, .prompt_ids = std::nullopt, .ids_broken = true});
      }
      ids_seen_ += skipped;
    }
    if (ids) ids_seen_ += ids->size();
    if (!ids) n = total ? (*total > last_total_ ? *total - last_total_ : 0) : 1;
    if (total) last_total_ = *total;

    const bool emits = (to_reasoning && !in_answer_) || !content.empty();
    if (!emits && !ids) n = 0;  // a role or finish chunk: no token in it
    if (to_reasoning && !in_answer_) {
      stream_chunk ch{.id = id_, .sample = 0, .reasoning = true, .text = std::string(reasoning), .tokens = {}};
      if (ids && content.empty() && !ids_broken_) ch.tokens = std::move(*ids);
      else if (content.empty()) ch.token_count = static_cast<std::uint32_t>(n);
      reasoning_tokens_ += content.empty() ? n : 0;
      if (!deliver(std::move(ch), out)) return;
    }
    if (!content.empty()) {
      in_answer_ = true;
      stream_chunk ch{.id = id_, .sample = 0, .reasoning = false, .text = std::string(content), .tokens = {}};
      if (ids) ch.tokens = std::move(*ids);
      else ch.token_count = static_cast<std::uint32_t>(n);
      if (!deliver(std::move(ch), out)) return;
    }
    streamed_ += n;
    if (auto f = string_at(c, "finish_reason"); !f.empty() && !finish_) {
      finish_ = std::string(f);
      ++progress_;
    }
  }

  /// False when the chunk would take the request past its byte limit: the stream has ended then.
  bool deliver(stream_chunk ch, delivery_batch& out) {
    bytes_ += chunk_bytes(ch);
    if (bytes_ > max_bytes_) {
      fail(too_long(max_bytes_), out);
      return false;
    }
    committed_ = true;
    ++progress_;
    out.emplace_back(std::move(ch));
    return true;
  }

  void fail(std::string_view message, delivery_batch& out) {
    if (ended_) return;
    end(finish_reason::error, streamed_ > 0 ? fmt::format("{} (after {} tokens, all delivered)", message, streamed_)
                                            : std::string(message),
        out);
  }

  void end(finish_reason why, std::string error, delivery_batch& out) {
    ended_ = true;
    usage u;
    u.prompt_tokens = usage_.prompt.value_or(0);
    u.cached_prompt_tokens = usage_.cached.value_or(0);
    u.completion_tokens = usage_.completion.value_or(streamed_);
    u.reasoning_tokens = usage_.reasoning.value_or(reasoning_tokens_);
    out.emplace_back(stream_end{.id = id_, .sample = 0, .reason = why, .used = u, .error = std::move(error)});
  }

  stream_id id_;
  std::vector<token_id> think_open_;
  std::uint64_t max_bytes_;
  std::uint64_t bytes_ = 0;     ///< text and ids delivered
  std::uint64_t progress_ = 0;
  usage_report usage_{};
  std::optional<std::string> finish_{};
  std::uint64_t ids_seen_ = 0;    ///< completion tokens accounted for by ids (streamed or inferred)
  std::uint64_t last_total_ = 0;  ///< last cumulative completion count
  std::uint64_t streamed_ = 0;
  std::uint64_t reasoning_tokens_ = 0;
  bool in_answer_ = false;
  bool ids_broken_ = false;
  bool committed_ = false;
  bool ended_ = false;
};

class fork_decoder final : public stream_decoder {
 public:
  fork_decoder(stream_id id, fork_decoding how) : id_(id), how_(how), samples_(static_cast<std::size_t>(how.samples)) {}

  void on_event(std::string_view data, delivery_batch& out) override {
    if (finished()) return;
    json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      on_failure(fmt::format("the server sent a malformed event: {}", excerpt(data)), out);
      return;
    }
    if (auto e = event_error(j)) {
      on_failure(fmt::format("the server reported an error: {}", excerpt(*e, 300)), out);
      return;
    }
    try {
      event(j, out);
    } catch (const json_read_error& e) {
      on_failure(malformed(e), out);
    }
  }

  void on_done(delivery_batch& out) override { end_all("the server ended the stream ([DONE]) before this sample finished", out); }
  void on_eof(delivery_batch& out) override { end_all("the server closed the stream before this sample finished", out); }

  void on_failure(std::string_view message, delivery_batch& out) override {
    const std::string m = streamed_ > 0 ? fmt::format("{} (after {} tokens, all delivered)", message, streamed_) : std::string(message);
    for (std::size_t i = 0; i < samples_.size(); ++i) {
      sample& s = samples_[i];
      if (s.ended) continue;
      // A sample whose candidate is complete keeps it: the failure came after.
      if (s.complete) finish(s, static_cast<int>(i), finish_reason::stop, {}, out);
      else finish(s, static_cast<int>(i), finish_reason::error, m, out);
    }
    waiting_.reset();
  }

  [[nodiscard]] bool committed() const noexcept override { return committed_; }
  [[nodiscard]] bool finished() const noexcept override { return open_() == 0; }
  [[nodiscard]] std::uint64_t progress() const noexcept override { return progress_; }
  void reset() override { *this = fork_decoder(id_, how_); }

 private:
  struct sample {
    fence_scanner fences{};
    std::uint64_t fed = 0;
    bool source = false, plan = false;
    bool complete = false;  ///< its candidate closed: later text is not delivered
    std::optional<std::string> finish{};
    std::uint64_t tokens = 0;
    bool ended = false;
  };

  [[nodiscard]] std::size_t open_() const noexcept {
    return static_cast<std::size_t>(std::count_if(samples_.begin(), samples_.end(), [](const sample& s) { return !s.ended; }));
  }

  /// One event that is not an error report.
  void event(const json& j, delivery_batch& out) {
    // The usage object is read only when needed: a choice without token ids, or the final report.
    const json* usage_obj = object_at(j, "usage");
    std::optional<usage_report> used;
    auto usage_now = [&]() -> const usage_report& {
      if (!used) used = read_usage(j);
      return *used;
    };
    const bool was_waiting = waiting_.has_value();
    std::uint64_t arrived = 0;
    const json* choices = choices_of(j);
    if (choices != nullptr) {
      for (std::size_t k = 0; k < choices->size(); ++k) {
        const json& c = (*choices)[k];
        // Continuous usage reports each choice's own running count.
        const bool counted = usage_obj != nullptr && specgen::detail::present(c, "token_ids") == nullptr;
        const std::optional<std::uint64_t> total = counted ? usage_now().completion : std::nullopt;
        try {
          check_choice(c);
          const std::uint64_t i = count_at(c, "index").value_or(0);
          if (i >= samples_.size()) {
            on_failure(fmt::format("the server sent choice {} of a request for {}", i, samples_.size()), out);
            return;
          }
          arrived += choice(samples_[i], static_cast<int>(i), c, total, out);
        } catch (json_read_error& e) {
          e.nest(k);
          e.nest("choices");
          throw;
        }
      }
    }
    // A usage object without choices is the request's final report.
    if (usage_obj != nullptr && (choices == nullptr || choices->empty())) {
      if (!final_) ++progress_;
      final_ = usage_now();
      if (waiting_) end_sample(*waiting_, out);
    }
    if (waiting_ && was_waiting) {
      tail_ += arrived;
      // Tokens of every sample count: the server is still generating each of them.
      if (tail_ > static_cast<std::uint64_t>(how_.tail_tokens) * samples_.size()) end_sample(*waiting_, out);  // no usage report, then
    }
  }

  /// Returns the tokens this choice carried.
  /// `total`: the choice's running count of tokens from continuous usage, if any.
  std::uint64_t choice(sample& s, int index, const json& c, std::optional<std::uint64_t> total, delivery_batch& out) {
    std::optional<std::vector<token_id>> ids = ids_at(c, "token_ids");
    std::uint64_t n = ids ? ids->size() : 0;
    // value_or rather than *total: g++ 13 warns (maybe-uninitialized) on the dereference.
    const std::uint64_t running = total.value_or(0);
    if (!ids) n = total ? (running > s.tokens ? running - s.tokens : 0) : 1;
    std::string_view text = string_at(c, "text");
    if (text.empty() && !ids) n = 0;  // a finish chunk: no token in it
    s.tokens += n;
    streamed_ += n;
    if (n > 0) ++progress_;  // also past a sample's candidate: the server is still generating
    if (s.ended || s.complete) return n;
    bool cut = false;
    if (how_.stop_at_closing_fence && !text.empty()) {
      const std::uint64_t before = s.fed;
      for (const auto& b : s.fences.feed(text)) {
        s.source = s.source || specgen::detail::is_source_tag(b.tag);
        s.plan = s.plan || b.tag == "plan";
        if (s.source && s.plan) {
          text = text.substr(0, static_cast<std::size_t>(b.block.end - before));
          cut = true;
          break;
        }
      }
      s.fed += text.size();
    }
    if (!text.empty() || (ids && !ids->empty())) {
      stream_chunk ch{.id = id_, .sample = index, .reasoning = false, .text = std::string(text), .tokens = {}};
      if (ids && !cut) ch.tokens = std::move(*ids);
      else ch.token_count = static_cast<std::uint32_t>(n);
      bytes_ += chunk_bytes(ch);
      if (bytes_ > how_.max_bytes) {
        on_failure(too_long(how_.max_bytes), out);
        return n;
      }
      committed_ = true;
      ++progress_;
      out.emplace_back(std::move(ch));
    }
    if (auto f = string_at(c, "finish_reason"); !f.empty()) {
      if (!s.finish) ++progress_;
      s.finish = std::string(f);
    }
    if (cut) s.complete = true;
    if (s.complete || s.finish) ready(s, index, out);
    return n;
  }

  /// A sample has its answer: it ends now, unless it is the last one open,
  /// which waits (up to the tail) for the request's usage report.
  void ready(sample& s, int index, delivery_batch& out) {
    if (open_() > 1 || final_ || how_.tail_tokens == 0) {
      finish(s, index, s.complete ? finish_reason::stop : map_finish(*s.finish), finish_text(s), out);
      return;
    }
    waiting_ = index;
    tail_ = 0;
  }

  void end_sample(int index, delivery_batch& out) {
    sample& s = samples_[static_cast<std::size_t>(index)];
    waiting_.reset();
    if (!s.ended) finish(s, index, s.complete ? finish_reason::stop : map_finish(*s.finish), finish_text(s), out);
  }

  void end_all(std::string_view unfinished, delivery_batch& out) {
    waiting_.reset();
    for (std::size_t i = 0; i < samples_.size(); ++i) {
      sample& s = samples_[i];
      if (s.ended) continue;
      if (s.complete || s.finish) finish(s, static_cast<int>(i), s.complete ? finish_reason::stop : map_finish(*s.finish), finish_text(s), out);
      else finish(s, static_cast<int>(i), finish_reason::error, std::string(unfinished), out);
    }
  }

  static std::string finish_text(const sample& s) {
    if (s.complete || !s.finish || map_finish(*s.finish) != finish_reason::error) return {};
    return fmt::format("the server finished the sample with \"{}\"", excerpt(*s.finish));
  }

  void finish(sample& s, int index, finish_reason why, std::string error, delivery_batch& out) {
    s.ended = true;
    usage u;
    u.completion_tokens = s.tokens;
    if (open_() == 0 && final_) {  // the last sample to end carries the request's prompt-side usage
      u.prompt_tokens = final_->prompt.value_or(0);
      u.cached_prompt_tokens = final_->cached.value_or(0);
    }
    out.emplace_back(stream_end{.id = id_, .sample = index, .reason = why, .used = u, .error = std::move(error)});
  }

  stream_id id_;
  fork_decoding how_;
  std::vector<sample> samples_;
  std::optional<usage_report> final_{};
  std::optional<int> waiting_{};  ///< the last sample, waiting for the usage report
  std::uint64_t tail_ = 0;        ///< tokens since it started waiting
  std::uint64_t streamed_ = 0;
  std::uint64_t bytes_ = 0;       ///< text and ids delivered, all samples
  std::uint64_t progress_ = 0;
  bool committed_ = false;
};

void append_ids(std::string& out, const std::vector<token_id>& ids) {
  out.push_back('[');
  char buf[16];
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out.push_back(',');
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ids[i]);
    out.append(buf, end);
  }
  out.push_back(']');
}

/// Seeds fit every server's integer type.
std::uint64_t portable_seed(std::uint64_t s) { return s & 0x7fffffffull; }

}  // namespace

std::optional<dialect> dialect_of(std::string_view kind) {
  if (kind == "vllm") return dialect{"vllm", "request_id", "/tokenize", "", true, true, true};
  // SGLang refuses return_token_ids on a streamed chat completion and honours
  // it on a streamed completion (docs/backends.md, "SGLang and token ids").
  if (kind == "sglang") return dialect{"sglang", "rid", "/v1/tokenize", "/abort_request", true, false, true};
  if (kind == "openai") return dialect{"openai", "", "", "", false, false, false};
  return std::nullopt;
}

std::unique_ptr<stream_decoder> make_main_decoder(stream_id id, std::vector<token_id> think_open, std::uint64_t max_bytes) {
  return std::make_unique<main_decoder>(id, std::move(think_open), max_bytes);
}

std::unique_ptr<stream_decoder> make_fork_decoder(stream_id id, fork_decoding how) {
  return std::make_unique<fork_decoder>(id, how);
}

std::string chat_body(const dialect& d, const std::string& model, const model_preset& family, const reasoning_request& r,
                      std::string_view request_id) {
  json messages = json::array();
  if (!r.system.empty()) messages.push_back({{"role", "system"}, {"content", r.system}});
  messages.push_back({{"role", "user"}, {"content", r.prompt}});
  json body = {{"model", model},
               {"messages", std::move(messages)},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", r.params.temperature},
               {"top_p", r.params.top_p},
               {"max_tokens", r.params.max_tokens},
               {"seed", portable_seed(r.ctx.seed)}};
  if (d.extensions) {
    body["stream_options"]["continuous_usage_stats"] = true;
    body.update(family.reasoning_options, /*merge_objects=*/true);
  }
  if (d.chat_token_ids) body["return_token_ids"] = true;
  if (!d.request_id_field.empty()) body[d.request_id_field] = request_id;
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string completion_body(const dialect& d, const std::string& model, const fork_prompt& prompt, int samples,
                            const sampling& params, int max_tokens, std::uint64_t seed, std::string_view request_id) {
  json body = {{"model", model},
               {"n", samples},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", params.temperature},
               {"top_p", params.top_p},
               {"max_tokens", max_tokens},
               {"seed", portable_seed(seed)}};
  if (d.extensions) body["stream_options"]["continuous_usage_stats"] = true;
  if (d.completion_token_ids) body["return_token_ids"] = true;
  // The template text carries any begin-of-sequence marker itself.
  if (prompt.is_text && d.kind == "vllm") body["add_special_tokens"] = false;
  if (!d.request_id_field.empty()) body[d.request_id_field] = request_id;
  if (prompt.is_text) {
    body["prompt"] = prompt.text;
    return body.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  // Up to 32K ids: written by hand, several times faster than through json.
  std::string rest = body.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(rest.size() + 16 + prompt.ids.size() * 7);
  out.append("{\"prompt\":");
  append_ids(out, prompt.ids);
  out.push_back(',');
  out.append(rest, 1);
  return out;
}

std::string render_fork_text(const model_preset& family, std::string_view system, std::string_view prompt,
                             std::string_view reasoning) {
  std::string out;
  out.reserve(family.prompt_template.size() + system.size() + prompt.size() + reasoning.size() + 256);
  std::string_view t = family.prompt_template;
  while (!t.empty()) {
    const std::size_t open = t.find('{');
    if (open == std::string_view::npos) {
      out.append(t);
      break;
    }
    out.append(t.substr(0, open));
    t.remove_prefix(open);
    if (t.starts_with("{system}")) {
      out.append(system);
      t.remove_prefix(8);
    } else if (t.starts_with("{prompt}")) {
      out.append(prompt);
      t.remove_prefix(8);
    } else {
      out.push_back('{');
      t.remove_prefix(1);
    }
  }
  out.append(family.think_open);
  out.append(reasoning);
  out.append(family.think_close);
  out.append(family.answer_cue);
  return out;
}

std::string error_message_of(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto e = event_error(j)) return excerpt(*e, 300);
    if (auto m = loose_string_at(j, "message"); !m.empty()) return excerpt(m, 300);
    if (auto m = loose_string_at(j, "detail"); !m.empty()) return excerpt(m, 300);
  }
  std::string_view s = body;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  return s.empty() ? std::string("(empty body)") : excerpt(s, 300);
}

}  // namespace openai::detail
SPECGEN_END_NAMESPACE
