#include "fake_server.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

extern char** environ;

SPECGEN_BEGIN_NAMESPACE
namespace openai::testing {

namespace {

using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

// Qwen3's ids for its special tokens.
constexpr token_id think_open_id = 151667;
constexpr token_id think_close_id = 151668;
constexpr std::pair<std::string_view, token_id> specials[] = {
    {"<|im_start|>", 151644}, {"<|im_end|>", 151645}, {"<think>", think_open_id}, {"</think>", think_close_id}};
constexpr token_id eos_id = 151645;
// A generator's multi-code-point pieces get ids from here up: above every code
// point's id (1000 + 0x10FFFF) and every special's.
constexpr token_id first_dictionary_id = 2000000;

/// Decodes one UTF-8 code point at `s[i]`; an invalid byte stands for itself.
std::pair<std::uint32_t, std::size_t> next_code_point(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const std::size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return {b, 1};
  std::uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (std::size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c >> 6) != 0x2) return {b, 1};
    cp = (cp << 6) | (c & 0x3F);
  }
  return {cp, n};
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

struct piece {
  std::string text;
  token_id id = 0;
  bool marker = false;  ///< a think marker: generated, counted, never streamed
};

/// A generated piece's id: a special's, a code point's, or (several code
/// points) an id the tokenizer never produces.
piece make_piece(const std::string& text) {
  for (const auto& [s, id] : specials)
    if (text == s) return {text, id, id == think_open_id || id == think_close_id};
  const auto ids = fake_server::tokenize(text);
  if (ids.size() == 1) return {text, ids[0], false};
  std::uint64_t h = 1469598103934665603ull;
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return {text, static_cast<token_id>(300000 + h % 100000), false};
}

std::vector<piece> code_point_pieces(std::string_view text) {
  std::vector<piece> out;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, n] = next_code_point(text, i);
    out.push_back({std::string(text.substr(i, n)), static_cast<token_id>(1000 + cp), false});
    i += n;
  }
  return out;
}

std::string reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

/// Bytes queued for one connection, written no earlier than `due`.
struct frame {
  clock_type::time_point due{};
  std::string bytes;
  bool close_after = false;
  bool paced = false;  ///< a decoded token: its delay past `due` is lateness
};

/// A streaming response being produced.
struct stream_state {
  int record = 0;
  bool chat = true;
  bool ids = false;              ///< token_ids in chunks
  bool include_usage = false;
  bool continuous = false;
  std::vector<std::vector<piece>> samples;  ///< chat: one
  std::size_t prompt_tokens = 0;
  std::uint64_t cached = 0;
  std::vector<token_id> sequence;  ///< chat: prompt + generated, for the prefix cache
  std::string id;                  ///< the chunks' "id"
  fault f{};
  int events = 0;
  enum class phase : std::uint8_t { first, tokens, finish, usage, done, closed } at = phase::first;
  std::size_t step = 0;
  bool answering = false;  ///< chat: the close marker has been generated
  std::vector<bool> prompt_ids_sent;  ///< completions with ids: each choice's first chunk carries the prompt's
  clock_type::time_point start{};
  clock_type::time_point last{};  ///< when the last token was due (paced with a slowdown)
  bool stalled = false;
  clock_type::time_point next_ping{};
  int pings = 0;
};

}  // namespace

std::string default_fork_answer(int sample) {
  return fmt::format(
      "```cuda\nextern \"C\" __global__ void fork_k{0}(float* x) {{ x[0] = {0}; }}\n```\n\n"
      "```plan\nlaunch fork_k{0} grid(1) block(1) args(x)\n```\n"
      "That is the kernel.",
      sample);
}

struct fake_server::impl {
  struct conn {
    int fd = -1;
    std::string in;
    clock_type::time_point in_started{};
    std::deque<frame> out;
    std::size_t out_off = 0;
    std::optional<stream_state> stream;
    int silent_record = -1;  ///< a request it reads and never answers
    bool closed = false;
  };

  server_options opt;
  int listen_fd = -1;
  int wake_fd = -1;
  int port = 0;
  std::thread thread;
  std::atomic<bool> stop{false};
  mutable std::mutex mutex;  // guards records, faults, aborted, lateness
  std::vector<request_record> records;
  std::deque<fault> faults;
  std::vector<std::string> aborted;
  std::vector<double> late;
  std::vector<std::unique_ptr<conn>> conns;
  std::unordered_set<std::uint64_t> cache;  // chained hashes of cached blocks
  // A generator's pieces: text -> id, and back (id - first_dictionary_id). Guarded by `mutex`.
  std::unordered_map<std::string, token_id> dictionary;
  std::vector<std::string> dictionary_text;
  /// A chat request played from a generator, for the forks that continue it.
  struct chat_memory {
    int record = 0;
    std::vector<token_id> prompt;     ///< the prompt's ids
    std::vector<token_id> output;     ///< every id it generates, think markers included
    std::string prompt_text;          ///< the templated prompt
    std::shared_ptr<const generation> gen;
  };
  std::vector<chat_memory> chats;  ///< the latest `max_chats`
  static constexpr std::size_t max_chats = 256;
  std::atomic<int> decoding_now{0};

  explicit impl(server_options o) : opt(std::move(o)) {
    if (!opt.fork_answer) opt.fork_answer = default_fork_answer;
    if (opt.port < 0 || opt.port > 65535) throw std::invalid_argument(fmt::format("fake_server: port {} is out of range", opt.port));
    listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) throw std::runtime_error(fmt::format("fake_server: socket: {}", std::strerror(errno)));
    int one = 1;
    ::setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // loopback only
    a.sin_port = htons(static_cast<std::uint16_t>(opt.port));
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd, 256) != 0)
      throw std::runtime_error(fmt::format("fake_server: bind/listen on 127.0.0.1:{}: {}", opt.port, std::strerror(errno)));
    socklen_t len = sizeof a;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    thread = std::thread([this] { run(); });
  }

  ~impl() {
    stop = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
    thread.join();
    for (auto& c : conns) ::close(c->fd);
    ::close(listen_fd);
    ::close(wake_fd);
  }

  // ---- the prefix cache ---------------------------------------------------------

  std::uint64_t cached_prefix(const std::vector<token_id>& ids) const {
    const std::size_t bs = opt.block_size;
    std::uint64_t h = 0;
    std::size_t blocks = 0;
    for (std::size_t b = 0; (b + 1) * bs <= ids.size(); ++b) {
      for (std::size_t i = b * bs; i < (b + 1) * bs; ++i) h = mix(h, static_cast<std::uint64_t>(ids[i]));
      if (!cache.contains(h)) break;
      ++blocks;
    }
    // The last prompt token is always computed (it yields the first output).
    return std::min<std::uint64_t>(blocks * bs, ids.empty() ? 0 : (ids.size() - 1) / bs * bs);
  }

  void remember(const std::vector<token_id>& ids) {
    const std::size_t bs = opt.block_size;
    std::uint64_t h = 0;
    for (std::size_t b = 0; (b + 1) * bs <= ids.size(); ++b) {
      for (std::size_t i = b * bs; i < (b + 1) * bs; ++i) h = mix(h, static_cast<std::uint64_t>(ids[i]));
      cache.insert(h);
    }
  }

  // ---- the loop -------------------------------------------------------------------

  void run() {
    std::vector<pollfd> fds;
    while (!stop) {
      const auto now = clock_type::now();
      decoding_now = count_decoding();
      fds.clear();
      fds.push_back({listen_fd, POLLIN, 0});
      fds.push_back({wake_fd, POLLIN, 0});
      auto wait = std::chrono::milliseconds(100);
      for (auto& c : conns) {
        short ev = POLLIN;
        if (!c->out.empty()) {
          if (c->out.front().due <= now) ev |= POLLOUT;
          else wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(c->out.front().due - now));
        } else if (c->stream && !c->stream->stalled && c->stream->at != stream_state::phase::closed) {
          wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(std::max(next_due(*c->stream) - now, clock_type::duration{0})));
        } else if (c->stream && c->stream->stalled && c->stream->f.ping_interval_s > 0) {
          wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(std::max(c->stream->next_ping - now, clock_type::duration{0})));
        }
        fds.push_back({c->fd, ev, 0});
      }
      // Sub-millisecond pauses (split pieces) would sleep a whole millisecond: spin a little instead.
      ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(wait.count(), 0)));
      if (fds[0].revents & POLLIN) accept_all();
      if (fds[1].revents & POLLIN) {
        std::uint64_t v = 0;
        [[maybe_unused]] auto n = ::read(wake_fd, &v, sizeof v);
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        conn& c = *conns[i - 2];
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(c);
      }
      decoding_now = count_decoding();  // streams just started or closed count at once
      for (auto& c : conns)
        if (!c->closed) pump(*c);
      decoding_now = count_decoding();
      std::erase_if(conns, [](const std::unique_ptr<conn>& c) {
        if (c->closed) ::close(c->fd);
        return c->closed;
      });
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<conn>();
      c->fd = fd;
      conns.push_back(std::move(c));
    }
  }

  void read_from(conn& c) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        if (c.in.empty()) c.in_started = clock_type::now();
        c.in.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      client_gone(c);  // EOF or reset
      return;
    }
    while (!c.closed && !c.stream && c.silent_record < 0 && c.out.empty() && parse_request(c)) {
    }
  }

  void client_gone(conn& c) {
    // A stream counts until its last byte is written (`finished`), also once all its events are queued.
    const int rec = c.stream ? c.stream->record : c.silent_record;
    if (rec >= 0) {
      std::lock_guard lock(mutex);
      request_record& r = records[static_cast<std::size_t>(rec)];
      if (!r.finished) r.client_closed = true;
    }
    c.closed = true;
  }

  /// Parses one complete request from `c.in`, if there is one, and answers it.
  bool parse_request(conn& c) {
    const std::size_t head_end = c.in.find("\r\n\r\n");
    if (head_end == std::string::npos) return false;
    const std::string_view head(c.in.data(), head_end);
    request_record r;
    r.first_byte = c.in_started;
    const std::size_t eol = head.find("\r\n");
    const std::string_view line = head.substr(0, eol);
    const std::size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 + 1);
    r.method = std::string(line.substr(0, sp1));
    r.path = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    std::size_t content_length = 0;
    for (std::size_t pos = eol == std::string_view::npos ? head.size() : eol + 2; pos < head.size();) {
      std::size_t e = head.find("\r\n", pos);
      if (e == std::string_view::npos) e = head.size();
      const std::string_view h = head.substr(pos, e - pos);
      const std::size_t colon = h.find(':');
      if (colon != std::string_view::npos) {
        std::string name(h.substr(0, colon));
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
        std::string_view value = h.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        if (name == "content-length") content_length = std::stoul(std::string(value));
        r.headers[name] = std::string(value);
      }
      pos = e + 2;
    }
    if (c.in.size() < head_end + 4 + content_length) return false;
    const std::string body = c.in.substr(head_end + 4, content_length);
    c.in.erase(0, head_end + 4 + content_length);
    if (!c.in.empty()) c.in_started = clock_type::now();
    r.body = json::parse(body, nullptr, false);
    if (r.body.is_discarded()) r.body = nullptr;
    if (r.body.is_object()) {
      if (auto it = r.body.find("request_id"); it != r.body.end() && it->is_string()) r.rid = *it;
      if (auto it = r.body.find("rid"); it != r.body.end() && it->is_string()) r.rid = *it;
    }
    if (r.rid.empty() && r.headers.contains("x-request-id")) r.rid = r.headers["x-request-id"];
    answer(c, std::move(r));
    return true;
  }

  std::optional<fault> take_fault(const std::string& path, bool streaming) {
    std::lock_guard lock(mutex);
    for (auto it = faults.begin(); it != faults.end(); ++it)
      if (it->path == path || (it->path.empty() && streaming)) {
        fault f = *it;
        faults.erase(it);
        return f;
      }
    return std::nullopt;
  }

  int add_record(request_record r) {
    std::lock_guard lock(mutex);
    r.number = static_cast<int>(records.size());
    records.push_back(std::move(r));
    return records.back().number;
  }

  void send_plain(conn& c, int record, int status, const json& body, std::optional<double> retry_after = std::nullopt) {
    const std::string b = body.dump();
    std::string head = fmt::format("HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", status,
                                   reason_phrase(status), b.size());
    if (retry_after) head += fmt::format("retry-after: {}\r\n", *retry_after);
    c.out.push_back({clock_type::now(), head + "\r\n" + b, false, false});
    std::lock_guard lock(mutex);
    records[static_cast<std::size_t>(record)].status = status;
    records[static_cast<std::size_t>(record)].finished = true;
  }

  static json error_body(int status, std::string_view message) {
    return {{"error", {{"object", "error"}, {"message", message}, {"type", status == 429 ? "RateLimitError" : "InternalServerError"},
                       {"param", nullptr}, {"code", status}}}};
  }

  void answer(conn& c, request_record r) {
    const std::string path = r.path;
    const std::string method = r.method;
    const bool streaming = r.method == "POST" && (path == "/v1/chat/completions" || path == "/v1/completions");
    const json body = r.body;
    const std::string authorization = r.headers.contains("authorization") ? r.headers.at("authorization") : "";
    const int rec = add_record(std::move(r));
    const std::optional<fault> f = take_fault(path, streaming);
    if (f && f->silent) {
      c.silent_record = rec;
      return;
    }
    if (f && f->status != 200) {
      std::string message = f->status == 429 ? "Too many requests, slow down" : f->status >= 500 ? "Internal server error" : "Bad request";
      if (f->echo_authorization) message += fmt::format(" (request header authorization: {})", authorization);
      send_plain(c, rec, f->status, error_body(f->status, message),
                 f->retry_after_s >= 0 ? std::optional<double>(f->retry_after_s) : std::nullopt);
      return;
    }
    const bool vllm = opt.format == wire::vllm;
    if (method == "GET" && path == "/v1/models") {
      json list = {{"object", "list"},
                   {"data", {{{"id", opt.model}, {"object", "model"}, {"created", 1700000000}, {"owned_by", vllm ? "vllm" : "sglang"},
                              {"root", opt.model}, {"parent", nullptr}, {"max_model_len", 32768}}}}};
      if (opt.models_padding_bytes > 0) list["padding"] = std::string(opt.models_padding_bytes, ' ');
      send_plain(c, rec, 200, list);
      return;
    }
    // SGLang streams no token ids with a chat completion and says so (its
    // serving_chat.py checks both flags against stream before generating).
    if (!vllm && streaming && path == "/v1/chat/completions" && body.is_object() && body.value("stream", false)) {
      for (const char* flag : {"return_token_ids", "return_prompt_token_ids"})
        if (body.value(flag, false)) {
          send_plain(c, rec, 400,
                     {{"object", "error"},
                      {"message", fmt::format("{} is not supported with streaming on /v1/chat/completions; set stream to false to use it", flag)},
                      {"type", "BadRequestError"}, {"param", nullptr}, {"code", 400}});
          return;
        }
    }
    if (path == (vllm ? "/tokenize" : "/v1/tokenize") && body.is_object() && body.contains("prompt")) {
      const auto ids = tokenize(body["prompt"].get<std::string>());
      json out = {{"count", ids.size()}, {"max_model_len", 32768}, {"tokens", ids}};
      if (vllm) out["token_strs"] = nullptr;
      send_plain(c, rec, 200, out);
      return;
    }
    if (!vllm && path == "/abort_request" && body.is_object()) {
      const std::string rid = body.value("rid", "");
      {
        std::lock_guard lock(mutex);
        aborted.push_back(rid);
        for (auto& x : records)
          if (x.rid == rid) x.aborted = true;
      }
      for (auto& other : conns)
        if (other->stream && !other->closed && records_rid(other->stream->record) == rid) other->stream->at = stream_state::phase::finish;
      send_plain(c, rec, 200, json::object());
      return;
    }
    if (streaming && body.is_object()) {
      start_stream(c, rec, path == "/v1/chat/completions", body, f.value_or(fault{}));
      return;
    }
    send_plain(c, rec, 404, {{"detail", "Not Found"}});
  }

  std::string records_rid(int rec) {
    std::lock_guard lock(mutex);
    return records[static_cast<std::size_t>(rec)].rid;
  }

  void start_stream(conn& c, int rec, bool chat, const json& body, fault f) {
    stream_state s;
    s.record = rec;
    s.chat = chat;
    s.f = f;
    s.start = clock_type::now();
    // vLLM streams ids in both endpoints; SGLang only in completions (its chat refuses the request above).
    s.ids = opt.token_ids && body.value("return_token_ids", false) && (opt.format == wire::vllm || !chat);
    if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
      s.include_usage = so->value("include_usage", false);
      s.continuous = so->value("continuous_usage_stats", false);
    }
    std::vector<token_id> prompt;
    bool was_text = false;
    if (chat) {
      std::string system, user;
      for (const auto& m : body.value("messages", json::array())) {
        if (m.value("role", "") == "system") system = m.value("content", "");
        if (m.value("role", "") == "user") user = m.value("content", "");
      }
      prompt = tokenize(chat_template(system, user));
      std::vector<piece> plan{make_piece("<think>")};
      if (opt.generator) {
        std::shared_ptr<const generation> g = opt.generator(system, user);
        if (!g) g = std::make_shared<const generation>();
        if (!g->error.empty()) {
          send_plain(c, rec, 400, {{"object", "error"}, {"message", g->error}, {"type", "BadRequestError"}, {"param", nullptr}, {"code", 400}});
          return;
        }
        for (const auto& p : g->reasoning) plan.push_back(dictionary_piece(p));
        plan.push_back(make_piece("</think>"));
        for (const auto& p : g->answer) plan.push_back(dictionary_piece(p));
        chat_memory m{rec, prompt, {}, chat_template(system, user), g};
        for (const auto& p : plan) m.output.push_back(p.id);
        chats.push_back(std::move(m));
        if (chats.size() > max_chats) chats.erase(chats.begin());
        std::lock_guard lock(mutex);
        records[static_cast<std::size_t>(rec)].note = g->note;
      } else {
        for (const auto& p : opt.reasoning) plan.push_back(make_piece(p));
        plan.push_back(make_piece("</think>"));
        for (const auto& p : opt.answer) plan.push_back(make_piece(p));
      }
      s.samples.push_back(std::move(plan));
    } else {
      const json& p = body["prompt"];
      if (p.is_string()) {
        prompt = tokenize(p.get<std::string>());
        was_text = true;
      } else {
        for (const auto& v : p) prompt.push_back(v.get<token_id>());
      }
      const int n = body.value("n", 1);
      if (opt.generator) {
        for (auto& sample : fork_samples(rec, prompt, p.is_string() ? p.get<std::string>() : std::string(), was_text, n)) {
          std::vector<piece> pieces;
          for (const auto& text : sample) pieces.push_back(dictionary_piece(text));
          s.samples.push_back(std::move(pieces));
        }
      } else {
        for (int i = 0; i < n; ++i) s.samples.push_back(code_point_pieces(opt.fork_answer(i)));
      }
    }
    const std::size_t max_tokens = body.value("max_tokens", std::size_t{1} << 30);
    for (auto& sample : s.samples)
      if (sample.size() > max_tokens) sample.resize(max_tokens);
    s.prompt_tokens = prompt.size();
    s.cached = cached_prefix(prompt);
    remember(prompt);
    if (chat) s.sequence = prompt;
    s.id = fmt::format("{}{}", chat ? (opt.format == wire::vllm ? "chatcmpl-" : "") : "cmpl-", records_rid(rec));
    {
      std::lock_guard lock(mutex);
      request_record& r = records[static_cast<std::size_t>(rec)];
      r.prompt_ids = std::move(prompt);
      r.prompt_was_text = was_text;
      r.cached_tokens = s.cached;
      r.status = 200;
    }
    s.start = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(f.headers_delay_s));
    s.prompt_ids_sent.assign(s.samples.size(), false);
    c.out.push_back({s.start,
                     "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n",
                     false, false});
    c.stream = std::move(s);
  }

  clock_type::time_point next_due(const stream_state& s) const {
    if (s.at != stream_state::phase::tokens || opt.tokens_per_s <= 0) return s.start;
    if (opt.slowdown_per_sequence <= 0)
      return s.start + std::chrono::duration_cast<clock_type::duration>(
                           std::chrono::duration<double>(static_cast<double>(s.step + 1) / opt.tokens_per_s));
    // Each token 1/rate after the previous one, at the rate of the load now.
    const double rate = opt.tokens_per_s / (1.0 + opt.slowdown_per_sequence * static_cast<double>(std::max(decoding_now.load() - 1, 0)));
    return (s.step == 0 ? s.start : s.last) +
           std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(1.0 / rate));
  }

  /// Sequences decoding: each unfinished sample of every stream that is producing tokens.
  int count_decoding() const {
    int n = 0;
    for (const auto& c : conns) {
      if (c->closed || !c->stream || c->stream->stalled) continue;
      const stream_state& s = *c->stream;
      if (s.at != stream_state::phase::first && s.at != stream_state::phase::tokens) continue;
      for (const auto& sample : s.samples) n += s.step < sample.size() ? 1 : 0;
    }
    return n;
  }

  // ---- a generator's pieces and forks -----------------------------------------------

  /// A generator's piece: a special's or a code point's id, else the dictionary's.
  piece dictionary_piece(const std::string& text) {
    for (const auto& [sp, id] : specials)
      if (text == sp) return {text, id, id == think_open_id || id == think_close_id};
    const auto ids = fake_server::tokenize(text);
    if (ids.size() == 1) return {text, ids[0], false};
    std::lock_guard lock(mutex);
    auto [it, fresh] = dictionary.try_emplace(text, static_cast<token_id>(first_dictionary_id + dictionary_text.size()));
    if (fresh) dictionary_text.push_back(text);
    return {text, it->second, false};
  }

  /// The samples of a fork with a generator: from the chat request its prompt
  /// continues (the longest match, by ids or by text), else `unmatched_fork`.
  std::vector<std::vector<std::string>> fork_samples(int rec, const std::vector<token_id>& prompt, const std::string& text,
                                                     bool was_text, int n) {
    const chat_memory* best = nullptr;
    std::size_t best_len = 0, best_reasoning = 0;
    for (auto it = chats.rbegin(); it != chats.rend(); ++it) {
      const chat_memory& m = *it;
      std::size_t matched = 0, reasoning = 0;
      if (!was_text) {
        if (prompt.size() < m.prompt.size() || !std::equal(m.prompt.begin(), m.prompt.end(), prompt.begin())) continue;
        while (m.prompt.size() + matched < prompt.size() && matched < m.output.size() &&
               prompt[m.prompt.size() + matched] == m.output[matched])
          ++matched;
        for (std::size_t i = 0; i < matched; ++i) {
          if (m.output[i] == think_close_id) break;
          if (m.output[i] != think_open_id) ++reasoning;
        }
      } else {
        if (!text.starts_with(m.prompt_text)) continue;
        std::string_view rest(text);
        rest.remove_prefix(m.prompt_text.size());
        if (rest.starts_with("<think>")) rest.remove_prefix(7);
        for (const auto& piece : m.gen->reasoning) {
          if (piece.empty() || !rest.starts_with(piece)) break;
          rest.remove_prefix(piece.size());
          ++reasoning;
        }
        matched = m.prompt_text.size() + reasoning;
      }
      if (!best || matched > best_len) {
        best = &m;
        best_len = matched;
        best_reasoning = reasoning;
      }
    }
    std::vector<std::vector<std::string>> out;
    if (best && best->gen->fork) out = best->gen->fork(best_reasoning, n);
    out.resize(static_cast<std::size_t>(std::max(n, 0)));
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i].empty()) out[i] = unmatched(static_cast<int>(i));
    std::lock_guard lock(mutex);
    request_record& r = records[static_cast<std::size_t>(rec)];
    if (best) {
      r.continues = best->record;
      r.fork_reasoning_tokens = best_reasoning;
      r.note = fmt::format("fork of request {} after {} reasoning tokens", best->record, best_reasoning);
    } else {
      r.note = "fork that continues no chat request";
    }
    return out;
  }

  std::vector<std::string> unmatched(int sample) const {
    if (opt.unmatched_fork) return opt.unmatched_fork(sample);
    const std::string_view text =
        "I cannot tell which reasoning this continues, so I have no kernel to write yet.";
    std::vector<std::string> pieces;
    for (std::size_t i = 0; i < text.size(); i += 4) pieces.emplace_back(text.substr(i, 4));
    return pieces;
  }

  /// Produces the stream's due events, then writes what is due.
  void pump(conn& c) {
    const auto now = clock_type::now();
    if (c.stream && c.stream->stalled && c.stream->f.ping_interval_s > 0 && now >= c.stream->next_ping) {
      // Keep-alives of both kinds: they keep a connection busy without moving the stream forward.
      stream_state& s = *c.stream;
      json empty = chunk_head(s);
      empty["choices"] = json::array();
      c.out.push_back({now, http_chunk(s.pings++ % 2 == 0 ? std::string(": ping\n\n") : "data: " + empty.dump() + "\n\n"), false, false});
      s.next_ping = now + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(s.f.ping_interval_s));
    }
    while (c.stream && !c.stream->stalled && c.stream->at != stream_state::phase::closed && c.out.size() < 8 &&
           next_due(*c.stream) <= now) {
      const auto due = next_due(*c.stream);
      produce(c, *c.stream, due);
    }
    write_due(c, now);
  }

  void produce(conn& c, stream_state& s, clock_type::time_point due) {
    using phase = stream_state::phase;
    const bool vllm = opt.format == wire::vllm;
    switch (s.at) {
      case phase::first: {
        json ch = chunk_head(s);
        json choice = {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
        if (!vllm) choice["delta"] = {{"role", "assistant"}, {"content", ""}, {"reasoning_content", nullptr}, {"tool_calls", nullptr}};
        if (!s.chat) choice = {{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
        ch["choices"] = json::array({choice});
        if (s.chat && s.ids) ch["prompt_token_ids"] = record_prompt(s.record);
        if (s.chat) event(c, s, ch.dump(), due, false);
        s.at = phase::tokens;
        return;
      }
      case phase::tokens: {
        bool any = false;
        json choices = json::array();
        for (std::size_t i = 0; i < s.samples.size(); ++i) {
          const auto& sample = s.samples[i];
          if (s.step >= sample.size()) {
            if (s.step == sample.size()) choices.push_back(finish_choice(s, i));
            continue;
          }
          any = true;
          const piece& p = sample[s.step];
          generated(s, p.id);
          if (p.id == think_close_id) s.answering = true;
          if (p.marker) continue;  // as vLLM's and SGLang's reasoning parsers: no chunk for a bare think marker
          choices.push_back(token_choice(s, i, p));
          add_prompt_ids(s, choices.back());
        }
        for (auto& ch : choices) {
          json e = chunk_head(s);
          const auto idx = ch["index"].get<std::size_t>();
          e["choices"] = json::array({std::move(ch)});
          if (s.continuous) e["usage"] = usage(s, std::min(s.step + 1, s.samples[idx].size()), false);
          else if (!vllm) e["usage"] = nullptr;
          event(c, s, e.dump(), due, true);
          if (s.at != phase::tokens) return;  // a fault ended the stream
        }
        ++s.step;
        s.last = due;
        if (!any) s.at = phase::usage;
        return;
      }
      case phase::finish: {  // aborted by /abort_request
        json e = chunk_head(s);
        json ch = finish_choice(s, 0);
        ch["finish_reason"] = "abort";
        e["choices"] = json::array({ch});
        event(c, s, e.dump(), due, false);
        s.at = phase::usage;
        return;
      }
      case phase::usage: {
        if (s.include_usage) {
          json e = chunk_head(s);
          e["choices"] = json::array();
          std::size_t total = 0;
          for (const auto& sample : s.samples) total += std::min(sample.size(), s.step);
          e["usage"] = usage(s, total, true);
          event(c, s, e.dump(), due, false);
        }
        s.at = phase::done;
        return;
      }
      case phase::done:
        event(c, s, "[DONE]", due, false);
        end_stream(c, s);
        return;
      case phase::closed:
        return;
    }
  }

  json chunk_head(const stream_state& s) const {
    return {{"id", s.id}, {"object", s.chat ? "chat.completion.chunk" : "text_completion"}, {"created", 1700000000}, {"model", opt.model}};
  }

  json token_choice(const stream_state& s, std::size_t i, const piece& p) const {
    const bool vllm = opt.format == wire::vllm;
    json ch;
    if (s.chat) {
      const bool reasoning = !s.answering;
      json delta;
      if (vllm) delta[reasoning ? opt.reasoning_field : "content"] = p.text;
      else delta = {{"role", nullptr}, {"content", reasoning ? json(nullptr) : json(p.text)},
                    {"reasoning_content", reasoning ? json(p.text) : json(nullptr)}, {"tool_calls", nullptr}};
      ch = {{"index", i}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (!vllm) ch["matched_stop"] = nullptr;
    } else {
      ch = {{"index", i}, {"text", p.text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (vllm) ch["stop_reason"] = nullptr;
      else ch["matched_stop"] = nullptr;
    }
    if (s.ids) ch["token_ids"] = json::array({p.id});
    return ch;
  }

  /// SGLang's completions: each choice's first chunk carries the prompt's ids.
  void add_prompt_ids(stream_state& s, json& choice) {
    const auto i = choice["index"].get<std::size_t>();
    if (opt.format != wire::sglang || s.chat || !s.ids || s.prompt_ids_sent[i]) return;
    s.prompt_ids_sent[i] = true;
    choice["prompt_token_ids"] = record_prompt(s.record);
  }

  json finish_choice(const stream_state& s, std::size_t i) const {
    const bool vllm = opt.format == wire::vllm;
    json ch;
    if (s.chat) ch = {{"index", i}, {"delta", vllm ? json{{"content", ""}} : json{{"role", nullptr}, {"content", nullptr}, {"reasoning_content", nullptr}, {"tool_calls", nullptr}}}};
    else ch = {{"index", i}, {"text", ""}};
    ch["logprobs"] = nullptr;
    ch["finish_reason"] = "stop";
    if (vllm) ch["stop_reason"] = nullptr;
    else ch["matched_stop"] = eos_id;
    if (s.ids) ch["token_ids"] = json::array();
    return ch;
  }

  json usage(const stream_state& s, std::size_t completion, bool final) const {
    json u = {{"prompt_tokens", s.prompt_tokens}, {"total_tokens", s.prompt_tokens + completion}, {"completion_tokens", completion}};
    if (final && opt.cache_report) u["prompt_tokens_details"] = {{"cached_tokens", s.cached}};
    if (final && opt.format == wire::sglang && s.chat) {
      std::size_t r = 0;
      for (const auto& p : s.samples[0]) {
        if (p.id == think_close_id) break;
        ++r;
      }
      u["reasoning_tokens"] = std::min(r, completion);
    }
    return u;
  }

  json record_prompt(int rec) {
    std::lock_guard lock(mutex);
    return records[static_cast<std::size_t>(rec)].prompt_ids;
  }

  void generated(stream_state& s, token_id id) {
    std::lock_guard lock(mutex);
    records[static_cast<std::size_t>(s.record)].generated.push_back(id);
    if (s.chat) {
      s.sequence.push_back(id);
      if (s.sequence.size() % opt.block_size == 0) remember(s.sequence);
    }
  }

  /// Queues one SSE event, applying the stream's fault.
  void event(conn& c, stream_state& s, const std::string& data, clock_type::time_point due, bool paced) {
    const fault& f = s.f;
    const int n = s.events++;
    if (f.stall_after_events >= 0 && n >= f.stall_after_events) {
      s.stalled = true;
      s.next_ping = clock_type::now();
      return;
    }
    if (f.drop_after_events >= 0 && n >= f.drop_after_events) {
      if (c.out.empty()) c.out.push_back({due, "", true, false});
      else c.out.back().close_after = true;
      s.at = stream_state::phase::closed;
      return;
    }
    std::string payload = data;
    bool last = false;
    if (n == f.malformed_at_event) payload = R"({"id":"x","choices":[{"index":0,"delta":{"content":"unterminated)";
    if (n == f.huge_at_event)
      payload = json{{"id", s.id}, {"choices", {{{"index", 0}, {"delta", {{"reasoning_content", std::string(f.huge_bytes, 'x')}}}}}}}.dump();
    if (n == f.error_at_event) {
      payload = json{{"error", {{"object", "error"}, {"message", "The model ran out of KV cache"}, {"type", "InternalServerError"},
                                {"param", nullptr}, {"code", 500}}}}.dump();
      last = true;
    }
    const std::string_view eol = f.crlf ? "\r\n" : "\n";
    std::string text;
    if (f.keepalives) text += fmt::format(": keep-alive{}{}", eol, eol);
    text += fmt::format("data: {}{}{}", payload, eol, eol);
    if (last) text += fmt::format("data: [DONE]{}{}", eol, eol);
    if (f.split_bytes == 0) {
      c.out.push_back({due, http_chunk(text), false, paced});
    } else {
      static constexpr std::size_t sizes[] = {1, 2, 3, 5, 7, 11, 4};
      std::size_t k = 0, at = 0;
      auto when = std::max(due, c.out.empty() ? due : c.out.back().due);
      const auto gap = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(f.piece_interval_s));
      while (at < text.size()) {
        const std::size_t len = std::min({sizes[k++ % std::size(sizes)], f.split_bytes, text.size() - at});
        c.out.push_back({when, http_chunk(text.substr(at, len)), false, paced && at == 0});
        at += len;
        when += gap;
      }
    }
    {
      std::lock_guard lock(mutex);
      records[static_cast<std::size_t>(s.record)].events_sent = s.events;
    }
    if (last) end_stream(c, s);
  }

  static std::string http_chunk(std::string_view data) { return fmt::format("{:x}\r\n{}\r\n", data.size(), data); }

  void end_stream(conn& c, stream_state& s) {
    c.out.push_back({c.out.empty() ? clock_type::now() : c.out.back().due, "0\r\n\r\n", false, false});
    s.at = stream_state::phase::closed;
  }

  void write_due(conn& c, clock_type::time_point now) {
    while (!c.out.empty() && c.out.front().due <= now) {
      frame& fr = c.out.front();
      while (c.out_off < fr.bytes.size()) {
        const ssize_t n = ::send(c.fd, fr.bytes.data() + c.out_off, fr.bytes.size() - c.out_off, MSG_NOSIGNAL);
        if (n > 0) {
          c.out_off += static_cast<std::size_t>(n);
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        client_gone(c);
        return;
      }
      if (fr.paced && opt.record_lateness) {
        std::lock_guard lock(mutex);
        late.push_back(std::chrono::duration<double>(now - fr.due).count());
      }
      const bool close_after = fr.close_after;
      c.out.pop_front();
      c.out_off = 0;
      if (close_after) {
        c.closed = true;  // the "dropped connection" fault: the record stays unfinished
        return;
      }
      if (c.out.empty() && c.stream && c.stream->at == stream_state::phase::closed) {
        {
          std::lock_guard lock(mutex);
          records[static_cast<std::size_t>(c.stream->record)].finished = true;
        }
        c.stream.reset();
        while (!c.closed && !c.stream && c.out.empty() && parse_request(c)) {
        }
      }
    }
  }
};

fake_server::fake_server(server_options options) : impl_(std::make_unique<impl>(std::move(options))) {}
fake_server::~fake_server() = default;

int fake_server::port() const noexcept { return impl_->port; }
std::string fake_server::base_url() const { return fmt::format("http://127.0.0.1:{}", impl_->port); }

void fake_server::push_fault(fault f) {
  std::lock_guard lock(impl_->mutex);
  impl_->faults.push_back(std::move(f));
}

std::vector<request_record> fake_server::requests() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->records;
}

std::vector<std::string> fake_server::aborted_rids() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->aborted;
}

bool fake_server::wait_until(const std::function<bool(const std::vector<request_record>&)>& pred, double timeout_s) const {
  const auto end = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(timeout_s));
  for (;;) {
    if (pred(requests())) return true;
    if (clock_type::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::vector<double> fake_server::lateness() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->late;
}

std::vector<token_id> fake_server::tokenize(std::string_view text) {
  std::vector<token_id> ids;
  for (std::size_t i = 0; i < text.size();) {
    bool special = false;
    for (const auto& [s, id] : specials)
      if (text.substr(i).starts_with(s)) {
        ids.push_back(id);
        i += s.size();
        special = true;
        break;
      }
    if (special) continue;
    const auto [cp, n] = next_code_point(text, i);
    ids.push_back(static_cast<token_id>(1000 + cp));
    i += n;
  }
  return ids;
}

std::string fake_server::chat_template(std::string_view system, std::string_view prompt) {
  std::string out;
  if (!system.empty()) out += fmt::format("<|im_start|>system\n{}<|im_end|>\n", system);
  out += fmt::format("<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", prompt);
  return out;
}

std::optional<std::string> fake_server::piece_of(token_id id) const {
  for (const auto& [s, sid] : specials)
    if (id == sid) return std::string(s);
  if (id >= first_dictionary_id) {
    std::lock_guard lock(impl_->mutex);
    const auto i = static_cast<std::size_t>(id - first_dictionary_id);
    if (i < impl_->dictionary_text.size()) return impl_->dictionary_text[i];
    return std::nullopt;
  }
  if (id < 1000 || id > 1000 + 0x10FFFF) return std::nullopt;
  const auto cp = static_cast<std::uint32_t>(id - 1000);
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

int fake_server::decoding_sequences() const { return impl_->decoding_now.load(); }

std::vector<token_id> fake_server::main_generation_ids() const {
  std::vector<token_id> ids{think_open_id};
  for (const auto& p : impl_->opt.reasoning) ids.push_back(make_piece(p).id);
  ids.push_back(think_close_id);
  for (const auto& p : impl_->opt.answer) ids.push_back(make_piece(p).id);
  return ids;
}

int run_with_port(std::string_view program, int port, std::vector<std::string> args) {
  if (args.empty()) return 127;
  for (auto& s : args)
    for (std::size_t at = s.find("{port}"); at != std::string::npos; at = s.find("{port}", at))
      s.replace(at, 6, std::to_string(port));
  std::vector<char*> cargs;
  for (auto& s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = ::posix_spawnp(&pid, cargs[0], nullptr, nullptr, cargs.data(), environ); rc != 0) {
    fmt::print(stderr, "{}: cannot run {}: error {}\n", program, args[0], rc);
    return 127;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace openai::testing
SPECGEN_END_NAMESPACE
