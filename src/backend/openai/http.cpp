#include "http.hpp"

#include "sse.hpp"

#include <curl/curl.h>

#include <sys/socket.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <chrono>
#include <cmath>
#include <ctime>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace openai::detail {

namespace {

using clock_type = std::chrono::steady_clock;

/// Bytes of a failed answer kept for its error message; the rest is not read.
constexpr std::size_t max_error_body = 64 * 1024;

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

/// Errors a retry can cure: the server was not there yet, or the connection
/// broke. A timeout is not among them: each retry would wait as long again.
bool transient(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
      return true;
    default:
      return false;
  }
}

bool retryable_status(long status) { return status == 429 || (status >= 500 && status <= 599); }
bool ok_status(long status) { return status >= 200 && status <= 299; }

/// "Retry-After: 3" (seconds; an HTTP date is ignored and the backoff used instead).
std::optional<double> parse_retry_after(std::string_view line) {
  constexpr std::string_view name = "retry-after:";
  if (line.size() < name.size()) return std::nullopt;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return std::nullopt;
  std::string value(line.substr(name.size()));
  try {
    std::size_t used = 0;
    const double s = std::stod(value, &used);
    if (s >= 0 && std::isfinite(s)) return s;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

struct http_client::impl {
  struct transfer {
    impl* owner = nullptr;
    int origin = 0;    ///< which of `opt.base_urls`
    stream_id id = 0;  ///< 0 for a plain request
    CURL* easy = nullptr;
    curl_socket_t sock = CURL_SOCKET_BAD;  ///< the connection's socket, once libcurl has one for it
    curl_slist* headers = nullptr;
    std::string url, method, body, request_id;
    std::string shown_url;  ///< `url` with its credentials redacted: what messages say
    abort_request abort{};
    std::unique_ptr<stream_decoder> decoder{};
    std::function<void(plain_result)> done{};
    sse_parser sse{};
    long status = 0;
    std::string answer{};  ///< a plain answer, or a failed one's body
    std::optional<double> retry_after{};
    int attempt = 0;
    bool in_multi = false;
    bool saw_done = false;
    bool stopped = false;     ///< the decoder needs nothing more: the write callback aborted the transfer
    bool headers_seen = false;  ///< a final response's status line arrived
    bool body_cut = false;    ///< an error body reached max_error_body: the rest was not read
    std::string refused{};    ///< why the client stopped reading a plain answer ("" when it did not)
    clock_type::time_point launched{};
    std::optional<clock_type::time_point> sent_at{};  ///< when the request went out (connected)
    clock_type::time_point last_progress{};           ///< launch, or the last event that moved the stream forward

    transfer() = default;
    transfer(const transfer&) = delete;  // curl holds a pointer to it
    transfer& operator=(const transfer&) = delete;
    ~transfer() {
      if (easy) curl_easy_cleanup(easy);
      if (headers) curl_slist_free_all(headers);
    }
  };

  struct command {
    enum class kind : std::uint8_t { start, cancel, stop, down } what = kind::start;
    stream_id id = 0;  ///< of `cancel`; the origin of `down`
    std::unique_ptr<transfer> t{};
  };

  /// One server's health, as the I/O thread sees it.
  struct origin_state {
    // Whether the server answers at all, asked (GET /v1/models) when a
    // stream has waited response_timeout_s for its headers.
    bool liveness_in_flight = false;
    clock_type::time_point alive_until{};  ///< the server answered a check: streams may wait for headers until then
    bool down = false;                     ///< out of rotation (only with several origins)
    bool probe_in_flight = false;
    clock_type::time_point next_probe{};  ///< when a down origin is asked again
  };

  client_options opt;
  deliver_fn deliver;
  serves_fn serves;
  std::vector<origin_state> origins;
  CURLM* multi = nullptr;
  // libcurl's socket interface on our own epoll: each wake-up costs work for
  // the sockets that are ready, not for every transfer (curl_multi_perform
  // visits all of them), which keeps the cost per chunk flat with 64 streams.
  int epfd = -1;
  int wake_fd = -1;  ///< an eventfd: commands are waiting
  std::optional<clock_type::time_point> curl_due{};  ///< when libcurl wants its timeout action
  std::thread thread;
  std::mutex mutex;
  std::vector<command> commands;  // guarded by mutex
  std::unordered_map<stream_id, std::unique_ptr<transfer>> streams;
  std::vector<std::unique_ptr<transfer>> plains;
  std::vector<std::pair<clock_type::time_point, stream_id>> retry_queue;
  delivery_batch batch;
  clock_type::time_point next_idle_check{};
  std::atomic<std::uint64_t> http_requests{0}, retries{0}, aborts_posted{0};
  std::atomic<bool> running{true};
  std::atomic<bool> commands_waiting{false};
  double final_cpu = 0;  ///< CPU time at exit, once the thread is gone

  impl(client_options o, deliver_fn d, serves_fn sv)
      : opt(std::move(o)), deliver(std::move(d)), serves(std::move(sv)), origins(opt.base_urls.size()) {
    if (opt.base_urls.empty()) throw std::invalid_argument("openai backend: no server to talk to");
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    multi = curl_multi_init();
    epfd = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!multi || epfd < 0 || wake_fd < 0) throw std::runtime_error("openai backend: cannot set up the I/O loop (curl_multi_init, epoll, eventfd)");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd;
    ::epoll_ctl(epfd, EPOLL_CTL_ADD, wake_fd, &ev);
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &impl::on_socket);
    curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &impl::on_timer);
    curl_multi_setopt(multi, CURLMOPT_TIMERDATA, this);
    thread = std::thread([this] { run(); });
  }

  ~impl() {
    push(command{.what = command::kind::stop, .id = 0, .t = nullptr});
    thread.join();
    for (auto& [id, t] : streams)
      if (t->in_multi) curl_multi_remove_handle(multi, t->easy);
    for (auto& t : plains)
      if (t->in_multi) curl_multi_remove_handle(multi, t->easy);
    streams.clear();
    plains.clear();
    curl_multi_cleanup(multi);
    ::close(epfd);
    ::close(wake_fd);
  }

  void push(command c) {
    {
      std::lock_guard lock(mutex);
      commands.push_back(std::move(c));
    }
    commands_waiting = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd, &one, sizeof one);
  }

  std::unique_ptr<transfer> make(int origin, std::string method, std::string path, std::string body, bool stream) {
    auto t = std::make_unique<transfer>();
    t->owner = this;
    t->origin = origin;
    t->url = opt.base_urls.at(static_cast<std::size_t>(origin)) + path;
    t->shown_url = redact_url(t->url);
    t->method = std::move(method);
    t->sse.set_limit(static_cast<std::size_t>(opt.max_event_bytes));
    t->body = std::move(body);
    t->easy = curl_easy_init();
    if (!t->easy) throw std::runtime_error("openai backend: curl_easy_init failed");
    // Without "Expect:" curl waits for a "100 Continue" before sending a large body (a fork's ids).
    t->headers = curl_slist_append(t->headers, "Expect:");
    if (t->method == "POST") t->headers = curl_slist_append(t->headers, "Content-Type: application/json");
    t->headers = curl_slist_append(t->headers, stream ? "Accept: text/event-stream" : "Accept: application/json");
    for (const auto& h : opt.headers) t->headers = curl_slist_append(t->headers, h.c_str());
    CURL* e = t->easy;
    curl_easy_setopt(e, CURLOPT_URL, t->url.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(ms(opt.connect_timeout_s).count()));
    // A plain answer is small: all of it must arrive within the response timeout.
    if (!stream) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(ms(opt.connect_timeout_s + opt.response_timeout_s).count()));
    if (t->method == "POST") {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.c_str());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->body.size()));
    }
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &impl::on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &impl::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    return t;
  }

  // ---- the I/O thread --------------------------------------------------------------

  static int on_socket(CURL* easy, curl_socket_t s, int what, void* user, void* assigned) {
    auto& m = *static_cast<impl*>(user);
    if (what == CURL_POLL_REMOVE) {
      ::epoll_ctl(m.epfd, EPOLL_CTL_DEL, s, nullptr);
      return 0;
    }
    transfer* tp = nullptr;
    if (easy && curl_easy_getinfo(easy, CURLINFO_PRIVATE, &tp) == CURLE_OK && tp) tp->sock = s;
    epoll_event ev{};
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    ev.data.fd = s;
    if (assigned) {
      // A connection reused from libcurl's cache keeps its assignment but was removed from the set.
      if (::epoll_ctl(m.epfd, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT) ::epoll_ctl(m.epfd, EPOLL_CTL_ADD, s, &ev);
    } else {
      ::epoll_ctl(m.epfd, EPOLL_CTL_ADD, s, &ev);
      curl_multi_assign(m.multi, s, &m);  // marks the socket as watched
    }
    return 0;
  }

  static int on_timer(CURLM*, long timeout_ms, void* user) {
    auto& m = *static_cast<impl*>(user);
    if (timeout_ms < 0) m.curl_due.reset();
    else m.curl_due = clock_type::now() + std::chrono::milliseconds(timeout_ms);
    return 0;
  }

  /// Runs the queued commands; false once told to stop.
  bool take_commands() {
    commands_waiting = false;
    std::vector<command> todo;
    {
      std::lock_guard lock(mutex);
      todo.swap(commands);
    }
    bool launched = false;
    for (auto& c : todo) {
      if (c.what == command::kind::stop) {
        final_cpu = thread_cpu(pthread_self());
        running = false;
        return false;
      }
      if (c.what == command::kind::down) {
        origin_state& o = origins.at(static_cast<std::size_t>(c.id));
        o.down = true;
        o.next_probe = clock_type::now() + ms(opt.instance_probe_s);
      } else if (c.what == command::kind::start) {
        launch(*c.t);
        launched = true;
        if (c.t->id) streams[c.t->id] = std::move(c.t);
        else plains.push_back(std::move(c.t));
      } else {
        cancel_now(c.id);
      }
    }
    if (launched) {  // connect now, not after the next wait: a fork's first byte is on the clock
      int running_handles = 0;
      curl_due.reset();
      curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running_handles);
    }
    return true;
  }

  void run() {
    // Few events per wait: a socket that became ready (a fork's connection) waits behind at most this many.
    std::array<epoll_event, 16> events{};
    while (take_commands()) {
      relaunch_due(clock_type::now());
      // The socket action that starts new requests may also finish others:
      // hand those over now, not after the next wait (up to a second).
      finish_completed();
      flush();
      const int n = ::epoll_wait(epfd, events.data(), static_cast<int>(events.size()), wait_ms());
      int running_handles = 0;
      for (int i = 0; i < n; ++i) {
        const int fd = events[static_cast<std::size_t>(i)].data.fd;
        const std::uint32_t e = events[static_cast<std::size_t>(i)].events;
        if (fd == wake_fd) {
          std::uint64_t v = 0;
          [[maybe_unused]] const auto r = ::read(wake_fd, &v, sizeof v);
          continue;
        }
        const int flags = ((e & (EPOLLIN | EPOLLHUP | EPOLLERR)) ? CURL_CSELECT_IN : 0) | ((e & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                          ((e & EPOLLERR) ? CURL_CSELECT_ERR : 0);
        curl_multi_socket_action(multi, fd, flags, &running_handles);
        // A request queued now would otherwise wait for the rest of this batch of chunks.
        if (commands_waiting && !take_commands()) return;
      }
      if (curl_due && *curl_due <= clock_type::now()) {
        curl_due.reset();
        curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running_handles);
      }
      finish_completed();
      check_timeouts(clock_type::now());
      probe_down(clock_type::now());
      flush();
    }
  }

  void finish_completed() {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left))
      if (m->msg == CURLMSG_DONE) completed(m->easy_handle, m->data.result);
  }

  /// Hands this turn's deliveries to the loop, in one batch.
  void flush() {
    if (batch.empty()) return;
    deliver(std::move(batch));
    batch = {};
  }

  /// Until the earliest of: libcurl's timeout, a retry, the next idle check.
  int wait_ms() const {
    const auto now = clock_type::now();
    auto until = now + std::chrono::seconds(1);
    if (curl_due) until = std::min(until, *curl_due);
    for (const auto& [due, id] : retry_queue) until = std::min(until, due);
    if (!streams.empty()) until = std::min(until, next_idle_check);
    for (const auto& o : origins)
      if (o.down && !o.probe_in_flight) until = std::min(until, o.next_probe);
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(std::max(until - now, clock_type::duration{0})).count());
  }

  void relaunch_due(clock_type::time_point now) {
    for (std::size_t i = 0; i < retry_queue.size();) {
      const auto [due, id] = retry_queue[i];
      if (due > now) {
        ++i;
        continue;
      }
      retry_queue.erase(retry_queue.begin() + static_cast<std::ptrdiff_t>(i));
      if (auto it = streams.find(id); it != streams.end() && !it->second->in_multi) launch(*it->second);
    }
  }

  void launch(transfer& t) {
    t.status = 0;
    t.answer.clear();
    t.retry_after.reset();
    t.saw_done = false;
    t.stopped = false;
    t.headers_seen = false;
    t.body_cut = false;
    t.refused.clear();
    t.sent_at.reset();
    t.sse.reset();
    if (t.decoder) t.decoder->reset();
    ++t.attempt;
    t.launched = t.last_progress = clock_type::now();
    curl_multi_add_handle(multi, t.easy);
    t.in_multi = true;
    ++http_requests;
  }

  static std::size_t on_header(char* p, std::size_t size, std::size_t n, void* user) {
    auto& t = *static_cast<transfer*>(user);
    const std::string_view line(p, size * n);
    if (line.starts_with("HTTP/")) {
      t.retry_after.reset();  // a new response (after a 100, or a redirect)
      // "HTTP/1.1 200 OK": a 1xx is not the answer yet.
      const std::size_t sp = line.find(' ');
      t.headers_seen = sp != std::string_view::npos && sp + 1 < line.size() && line[sp + 1] != '1';
    } else if (auto s = parse_retry_after(line)) {
      t.retry_after = s;
    }
    return size * n;
  }

  static std::size_t on_write(char* p, std::size_t size, std::size_t n, void* user) {
    auto& t = *static_cast<transfer*>(user);
    // Nothing may unwind through libcurl: a failure to handle the bytes ends this transfer only.
    try {
      return t.owner->write(t, std::string_view(p, size * n));
    } catch (const std::exception& e) {
      return t.owner->refuse(t, std::string("the client could not handle the answer: ") + e.what());
    } catch (...) {
      return t.owner->refuse(t, "the client could not handle the answer");
    }
  }

  /// Stops reading `t`'s answer for the reason given; returns 0, which makes curl abort the transfer.
  std::size_t refuse(transfer& t, std::string why) noexcept {
    try {
      if (t.decoder) {
        t.decoder->on_failure(why, batch);
        t.stopped = true;
      } else {
        t.refused = std::move(why);
      }
    } catch (...) {  // out of memory even for the message: the transfer still ends
      t.stopped = t.decoder != nullptr;
    }
    return 0;
  }

  std::size_t write(transfer& t, std::string_view bytes) {
    if (t.status == 0) curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &t.status);
    if (!ok_status(t.status)) {
      // Only the start of an error body goes into the message; the rest is not worth reading.
      t.answer.append(bytes.substr(0, max_error_body - std::min(max_error_body, t.answer.size())));
      if (t.answer.size() < max_error_body) return bytes.size();
      t.body_cut = true;
      return 0;
    }
    if (!t.decoder) {
      if (t.answer.size() + bytes.size() > opt.max_response_bytes)
        return refuse(t, fmt::format("the answer from {} is larger than max_response_bytes ({} bytes); raise "
                                     "max_response_bytes in the backend's configuration if it really is this large",
                                     t.shown_url, opt.max_response_bytes));
      t.answer.append(bytes);
      return bytes.size();
    }
    const std::uint64_t progress = t.decoder->progress();
    const bool fed = t.sse.feed(bytes, [&](std::string_view data) { event(t, data); });
    if (t.decoder->progress() != progress) t.last_progress = clock_type::now();
    if (!fed)
      return refuse(t, fmt::format("the stream from {} sent an SSE line or event longer than max_event_bytes ({} bytes); "
                                   "raise max_event_bytes in the backend's configuration if its events really are this large",
                                   t.shown_url, opt.max_event_bytes));
    if (t.decoder->finished() && !t.saw_done) {
      t.stopped = true;
      return 0;  // makes curl abort the transfer: nothing more is wanted
    }
    return bytes.size();
  }

  void event(transfer& t, std::string_view data) {
    if (t.decoder->finished()) return;
    if (data == "[DONE]") {
      t.saw_done = true;
      t.decoder->on_done(batch);
    } else {
      t.decoder->on_event(data, batch);
    }
  }

  void completed(CURL* easy, CURLcode rc) {
    transfer* tp = nullptr;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &tp);
    transfer& t = *tp;
    curl_multi_remove_handle(multi, easy);
    t.in_multi = false;
    if (t.status == 0) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &t.status);
    if (!t.decoder) {
      finish_plain(t, rc);
      return;
    }
    if (t.stopped) {  // every sample ended before the server finished: cancel it there
      post_abort(t);
      streams.erase(t.id);
      return;
    }
    const bool ok = ok_status(t.status);
    if (rc == CURLE_OK && ok) {
      t.sse.finish([&](std::string_view data) { event(t, data); });
      if (!t.decoder->finished()) {
        if (t.saw_done) t.decoder->on_done(batch);
        else t.decoder->on_eof(batch);
      }
      streams.erase(t.id);
      return;
    }
    // A failure: an HTTP error status, or a transport error (possibly mid-stream).
    const bool can_retry = !t.decoder->committed() && t.attempt <= opt.max_retries &&
                           (ok || t.status == 0 ? transient(rc) : retryable_status(t.status));
    if (can_retry) {
      ++retries;
      retry_queue.emplace_back(clock_type::now() + backoff(t), t.id);
      return;  // relaunched by the loop when due
    }
    if (ok) t.sse.finish([&](std::string_view data) { event(t, data); });  // keep a last complete event
    std::string why;
    if (!ok && t.status != 0)
      why = fmt::format("HTTP {} from {}: {}", t.status, t.shown_url, error_message_of(t.answer));
    else if (rc == CURLE_OPERATION_TIMEDOUT && !t.headers_seen)  // streams have no other time limit in curl
      why = fmt::format("no connection to {} within {} s (connect_timeout_s)", t.shown_url, opt.connect_timeout_s);
    else
      why = fmt::format("{} {}: {}", t.decoder->committed() ? "the stream from" : "no answer from", t.shown_url, curl_easy_strerror(rc));
    if (t.attempt > 1) why += fmt::format(" (after {} attempts)", t.attempt);
    // The server failed this request before its first token: no connection,
    // a broken one, or a 5xx, after the retries.
    if (!t.decoder->committed() && (ok || t.status == 0 ? transient(rc) || (rc == CURLE_OPERATION_TIMEDOUT && !t.headers_seen)
                                                        : t.status >= 500 && t.status <= 599))
      take_down(t.origin, why);  // before the stream's own end: the loop side ends it with the server's failure
    else if (t.decoder->committed() && t.status != 0 && ok && transient(rc) && rotation())
      check_liveness(t.origin);  // a broken stream: does its server still answer?
    t.decoder->on_failure(why, batch);
    streams.erase(t.id);
  }

  [[nodiscard]] bool rotation() const { return origins.size() > 1; }

  /// Takes an origin out of rotation (with several origins; one is never
  /// taken out) and tells the loop side, which ends the streams it had.
  void take_down(int origin, const std::string& why) {
    if (!rotation()) return;
    origin_state& o = origins[static_cast<std::size_t>(origin)];
    if (o.down) return;
    o.down = true;
    o.next_probe = clock_type::now() + ms(opt.instance_probe_s);
    batch.emplace_back(instance_event{.instance = origin, .up = false, .why = why});
  }

  /// Asks each origin out of rotation, when due, whether it serves again.
  void probe_down(clock_type::time_point now) {
    for (std::size_t i = 0; i < origins.size(); ++i) {
      origin_state& o = origins[i];
      if (!o.down || o.probe_in_flight || now < o.next_probe) continue;
      o.probe_in_flight = true;
      auto t = make(static_cast<int>(i), "GET", "/v1/models", "", false);
      t->done = [this, i](plain_result r) {
        origin_state& s = origins[i];
        s.probe_in_flight = false;
        if (s.down && (serves ? serves(r) : r.status == 200)) {
          s.down = false;
          s.alive_until = {};
          batch.emplace_back(instance_event{.instance = static_cast<int>(i), .up = true, .why = {}});
        } else {
          s.next_probe = clock_type::now() + ms(opt.instance_probe_s);
        }
      };
      launch(*t);
      plains.push_back(std::move(t));
    }
  }

  std::chrono::milliseconds backoff(const transfer& t) const {
    if (t.retry_after) return ms(std::min(*t.retry_after, opt.retry_max_s));
    // Exponential, with a deterministic spread of +-25% so that many streams
    // refused at once do not come back at once.
    const double base = std::min(opt.retry_max_s, opt.retry_initial_s * std::ldexp(1.0, std::max(t.attempt - 1, 0)));
    const std::uint64_t h = (t.id * 0x9e3779b97f4a7c15ull) ^ (static_cast<std::uint64_t>(t.attempt) * 0xbf58476d1ce4e5b9ull);
    const double spread = 0.75 + 0.5 * static_cast<double>(h >> 11) / static_cast<double>(1ull << 53);
    return ms(base * spread);
  }

  void finish_plain(transfer& t, CURLcode rc) {
    plain_result r;
    if (!t.refused.empty()) {
      r.error = std::move(t.refused);
    } else if (rc == CURLE_OK || t.body_cut) {
      r.status = t.status;
      r.body = std::move(t.answer);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
      r.error = fmt::format("no answer within {} s (connect_timeout_s + response_timeout_s)",
                            opt.connect_timeout_s + opt.response_timeout_s);
    } else {
      r.error = curl_easy_strerror(rc);
    }
    auto done = std::move(t.done);
    std::erase_if(plains, [&](const std::unique_ptr<transfer>& p) { return p.get() == &t; });
    if (done) done(std::move(r));
  }

  /// A stream past its response timeout: connected, the request sent, no response headers yet.
  bool waiting_for_headers(transfer& t, clock_type::time_point now) {
    if (t.headers_seen) return false;
    if (!t.sent_at) {
      curl_off_t us = 0;
      if (curl_easy_getinfo(t.easy, CURLINFO_PRETRANSFER_TIME_T, &us) == CURLE_OK && us > 0)
        t.sent_at = t.launched + std::chrono::microseconds(us);
      else if (now - t.launched > ms(opt.connect_timeout_s))
        t.sent_at = t.launched;  // connected, or curl would have given up (a reused connection may report 0)
    }
    return t.sent_at && now - *t.sent_at > ms(opt.response_timeout_s);
  }

  void check_timeouts(clock_type::time_point now) {
    if (now < next_idle_check) return;
    next_idle_check = now + std::chrono::milliseconds(20);
    std::vector<stream_id> expired;
    std::vector<int> ask_server;
    for (auto& [id, t] : streams) {
      if (!t->in_multi) continue;
      if (now - t->last_progress > ms(opt.idle_timeout_s)) expired.push_back(id);
      else if (waiting_for_headers(*t, now) && now >= origins[static_cast<std::size_t>(t->origin)].alive_until)
        ask_server.push_back(t->origin);
    }
    for (stream_id id : expired)
      end_stream(id, fmt::format("no progress from {} for {} s (idle_timeout_s; SSE comments and empty events do not count)",
                                 streams.at(id)->shown_url, opt.idle_timeout_s),
                 true);
    for (int origin : ask_server) check_liveness(origin);
  }

  /// Ends a stream the client gives up on; `abort` also cancels it on the server.
  void end_stream(stream_id id, const std::string& why, bool abort) {
    transfer& t = *streams.at(id);
    if (abort) close_connection(t);
    else curl_multi_remove_handle(multi, t.easy);
    t.in_multi = false;
    t.sse.finish([&](std::string_view data) { event(t, data); });
    t.decoder->on_failure(why, batch);
    if (abort) post_abort(t);
    streams.erase(id);
  }

  /// Streams wait for their headers as long as the server answers at all:
  /// SGLang sends none before a request's first token, so a queued request
  /// on a busy server waits here. A server that accepts connections and
  /// answers nothing ends them within two response timeouts.
  /// With several origins, one that does not answer is also taken out of rotation.
  void check_liveness(int origin) {
    origin_state& o = origins[static_cast<std::size_t>(origin)];
    if (o.liveness_in_flight) return;
    o.liveness_in_flight = true;
    auto t = make(origin, "GET", "/v1/models", "", false);
    t->done = [this, origin](plain_result r) {
      origin_state& s = origins[static_cast<std::size_t>(origin)];
      s.liveness_in_flight = false;
      const auto now = clock_type::now();
      if (r.status != 0) {  // any HTTP answer: alive, only busy
        s.alive_until = now + ms(opt.response_timeout_s);
        return;
      }
      const std::string root = redact_url(opt.base_urls[static_cast<std::size_t>(origin)]);
      take_down(origin, fmt::format("GET {}/v1/models got no answer ({})", root, r.error));
      std::vector<stream_id> dead;
      for (auto& [id, st] : streams)
        if (st->origin == origin && st->in_multi && waiting_for_headers(*st, now)) dead.push_back(id);
      for (stream_id id : dead)
        end_stream(id,
                   fmt::format("no response from {} within {} s of sending the request (response_timeout_s), and "
                               "GET {}/v1/models got none either ({}): the server accepts connections but does not answer",
                               streams.at(id)->shown_url, opt.response_timeout_s, root, r.error),
                   false);  // an abort would wait on the same silent server
    };
    launch(*t);
    plains.push_back(std::move(t));
  }

  void cancel_now(stream_id id) {
    auto it = streams.find(id);
    if (it == streams.end()) return;
    transfer& t = *it->second;
    if (t.in_multi) {
      close_connection(t);  // vLLM aborts a request whose connection closes
      post_abort(t);
    }
    streams.erase(it);
  }

  /// Ends a transfer mid-response and closes its connection at once. Removing
  /// the handle alone may leave the socket open in libcurl's connection cache
  /// (seen with several transfers in flight), and the server would then go on
  /// generating into it; shutting the socket down first makes the server see
  /// the close now, and libcurl then discards the dead connection.
  void close_connection(transfer& t) {
    if (t.sock != CURL_SOCKET_BAD) ::shutdown(t.sock, SHUT_RDWR);
    curl_multi_remove_handle(multi, t.easy);
    t.in_multi = false;
  }

  void post_abort(const transfer& t) {
    if (t.abort.path.empty()) return;
    ++aborts_posted;
    auto a = make(t.origin, "POST", t.abort.path, t.abort.body, false);
    launch(*a);
    plains.push_back(std::move(a));
  }

  static double thread_cpu(pthread_t th) {
    clockid_t cid{};
    timespec ts{};
    if (pthread_getcpuclockid(th, &cid) != 0 || clock_gettime(cid, &ts) != 0) return 0;
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
};

http_client::http_client(client_options options, deliver_fn deliver, serves_fn serves)
    : impl_(std::make_unique<impl>(std::move(options), std::move(deliver), std::move(serves))) {}

http_client::~http_client() = default;

void http_client::start_stream(int origin, stream_id id, std::string path, std::string body, std::string request_id,
                               abort_request abort, std::unique_ptr<stream_decoder> decoder) {
  auto t = impl_->make(origin, "POST", path, std::move(body), true);
  t->id = id;
  t->request_id = std::move(request_id);
  t->abort = std::move(abort);
  t->decoder = std::move(decoder);
  if (!t->request_id.empty()) {
    t->headers = curl_slist_append(t->headers, ("X-Request-Id: " + t->request_id).c_str());
    curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers);
  }
  impl_->push({.what = impl::command::kind::start, .id = id, .t = std::move(t)});
}

void http_client::cancel(stream_id id) { impl_->push({.what = impl::command::kind::cancel, .id = id, .t = nullptr}); }

void http_client::set_down(int origin) { impl_->push({.what = impl::command::kind::down, .id = static_cast<stream_id>(origin), .t = nullptr}); }

void http_client::request(int origin, std::string method, std::string path, std::string body, std::function<void(plain_result)> done) {
  auto t = impl_->make(origin, std::move(method), path, std::move(body), false);
  t->done = std::move(done);
  impl_->push({.what = impl::command::kind::start, .id = 0, .t = std::move(t)});
}

plain_result http_client::request_sync(int origin, std::string method, std::string path, std::string body) {
  auto p = std::make_shared<std::promise<plain_result>>();
  auto f = p->get_future();
  request(origin, std::move(method), std::move(path), std::move(body), [p](plain_result r) { p->set_value(std::move(r)); });
  return f.get();
}

client_counters http_client::counters() const noexcept {
  return {.http_requests = impl_->http_requests, .retries = impl_->retries, .aborts_posted = impl_->aborts_posted};
}

double http_client::io_cpu_seconds() const noexcept {
  return impl_->running ? impl::thread_cpu(const_cast<std::thread&>(impl_->thread).native_handle()) : impl_->final_cpu;
}


}  // namespace openai::detail
SPECGEN_END_NAMESPACE
