// The supervisor of one worker process: spawn, converse, watch, replace.
#include "gpu/supervisor/worker_host.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

std::vector<std::string> detail::worker_environment(const std::vector<std::string>& parent) {
  static constexpr std::string_view kept_prefixes[] = {
      "CUDA_", "NVIDIA_", "__NV_", "SPECGEN_", "FAKECUDA_", "ASAN_", "UBSAN_", "LSAN_", "TSAN_", "LC_"};
  static constexpr std::string_view kept_names[] = {"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "HOME", "TMPDIR", "LANG", "TZ"};
  std::vector<std::string> out;
  for (const auto& e : parent) {
    const std::string_view entry = e;
    const std::string_view name = entry.substr(0, entry.find('='));
    // The host sets these per worker.
    if (name == "SPECGEN_WORKER_DEVICE" || name.starts_with("SPECGEN_WORKER_BULK")) continue;
    bool keep = false;
    for (auto p : kept_prefixes) keep = keep || name.starts_with(p);
    for (auto n : kept_names) keep = keep || name == n;
    if (keep) out.push_back(e);
  }
  return out;
}

namespace detail {

using steady = std::chrono::steady_clock;

/// The worker's stderr kept for failure messages: enough to hold a CUDA error
/// or an assertion, bounded whatever the worker prints.
inline constexpr std::size_t stderr_tail_bytes = 4096;

/// A bulk region: a memfd of `size` bytes (sparse), mapped here read-only.
/// Not copyable: it owns the descriptor and the mapping.
struct bulk_mapping {
  int fd = -1;
  const char* data = nullptr;
  std::size_t size = 0;

  bulk_mapping() = default;
  bulk_mapping(const bulk_mapping&) = delete;
  bulk_mapping& operator=(const bulk_mapping&) = delete;
  ~bulk_mapping() {
    if (data) ::munmap(const_cast<char*>(data), size);
    if (fd >= 0) ::close(fd);
  }

  /// On any failure the worker simply gets no region and uses the channel.
  static std::shared_ptr<const bulk_mapping> open(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    auto m = std::make_shared<bulk_mapping>();
    m->fd = ::memfd_create("specgen-worker-bulk", MFD_CLOEXEC);
    if (m->fd < 0) return nullptr;
    if (::ftruncate(m->fd, static_cast<off_t>(bytes)) != 0) return nullptr;
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED | MAP_NORESERVE, m->fd, 0);
    if (p == MAP_FAILED) return nullptr;
    m->data = static_cast<const char*>(p);
    m->size = bytes;
    return m;
  }
};

/// The spawned process and the host's ends of its channel (a socketpair, so
/// writes can use MSG_NOSIGNAL: a dead worker must not SIGPIPE the host) and
/// of its stderr pipe. Not copyable: it owns descriptors and a process.
struct worker_process {
  pid_t pid = -1;
  int channel = -1;
  int err = -1;
  frame_decoder decoder;
  std::string err_tail;

  worker_process() = default;
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;
  /// The bulk region (a memfd), mapped read-only here. Shared: responses that
  /// point into it keep it mapped after this process is gone.
  std::shared_ptr<const bulk_mapping> bulk;

  ~worker_process() {
    if (channel >= 0) ::close(channel);
    if (err >= 0) ::close(err);
  }

  void keep_stderr(std::string_view bytes) {
    err_tail.append(bytes);
    if (err_tail.size() > stderr_tail_bytes) err_tail.erase(0, err_tail.size() - stderr_tail_bytes);
  }

  /// Reads what the stderr pipe holds now; false at end of file.
  bool drain_stderr() {
    std::array<char, 4096> buf;
    while (err >= 0) {
      ssize_t n = ::read(err, buf.data(), buf.size());
      if (n > 0) {
        keep_stderr(std::string_view(buf.data(), static_cast<std::size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        ::close(err);
        err = -1;
        return false;
      }
      return true;  // EAGAIN
    }
    return false;
  }

  /// Sends all of `bytes` before `until`; false when the worker is gone or stuck.
  bool send_all(std::string_view bytes, steady::time_point until) {
    while (!bytes.empty()) {
      ssize_t n = ::send(channel, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now()).count();
        if (left <= 0) return false;
        pollfd p{channel, POLLOUT, 0};
        ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
        continue;
      }
      return false;
    }
    return true;
  }
};

std::string_view signal_name(int sig) {
  switch (sig) {
    case SIGABRT: return "SIGABRT";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGPIPE: return "SIGPIPE";
    case SIGINT: return "SIGINT";
    default: return "signal";
  }
}

std::string describe_status(pid_t pid, int status) {
  if (WIFSIGNALED(status))
    return fmt::format("worker pid {} was killed by signal {} ({})", pid, WTERMSIG(status), signal_name(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("worker pid {} exited with status {}", pid, WEXITSTATUS(status));
  return fmt::format("worker pid {} ended with wait status {}", pid, status);
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace detail

struct worker_host::io_result {
  io_outcome outcome;
  frame message;
  std::string detail;  // the decoder's complaint for garbage
};

worker_host::worker_host(worker_config config) : config_(std::move(config)) {}

worker_host::~worker_host() {
  stop_heartbeat();
  std::lock_guard io(io_mutex_);
  if (!proc_) return;
  // A clean exit lets a real worker destroy its CUDA context; a short grace
  // period, then the same kill as for any failure.
  auto until = detail::steady::now() + std::chrono::milliseconds(200);
  if (proc_->send_all(encode({message_type::shutdown, 0, {}}), until)) {
    while (true) {
      auto r = wait_frame_locked(until, false);
      if (r.outcome != io_outcome::message) break;
    }
  }
  reap_locked();
  std::lock_guard st(state_mutex_);
  proc_.reset();
}

expected<void, worker_failure> worker_host::start() {
  {
    std::lock_guard io(io_mutex_);
    if (!proc_) {
      auto s = spawn_locked();
      if (!s) return s;
    }
  }
  std::lock_guard hb(hb_mutex_);
  if (!hb_thread_.joinable() && config_.heartbeat_interval > duration::zero())
    hb_thread_ = std::thread([this] { heartbeat_loop(); });
  return {};
}

expected<void, worker_failure> worker_host::spawn_locked() {
  auto fail = [&](std::string m) {
    return unexpected(worker_failure{worker_failure::kind::spawn_failed, std::move(m)});
  };
  int sv[2];
  int ep[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return fail(fmt::format("cannot create the worker channel: {}", std::strerror(errno)));
  if (::pipe2(ep, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return fail(fmt::format("cannot create the worker stderr pipe: {}", std::strerror(e)));
  }
  auto proc = std::make_unique<detail::worker_process>();
  proc->channel = sv[0];
  proc->err = ep[0];

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, ep[1], STDERR_FILENO);
  proc->bulk = detail::bulk_mapping::open(static_cast<std::size_t>(config_.bulk_bytes));
  if (proc->bulk) posix_spawn_file_actions_adddup2(&actions, proc->bulk->fd, detail::bulk_fd_in_worker);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so one kill also reaches anything it started.
  sigset_t none;
  sigset_t defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> parent;
  for (char** e = environ; e && *e; ++e) parent.emplace_back(*e);
  std::vector<std::string> env_store = detail::worker_environment(parent);
  env_store.push_back(fmt::format("SPECGEN_WORKER_DEVICE={}", config_.device));
  if (proc->bulk) {
    env_store.push_back(fmt::format("SPECGEN_WORKER_BULK_FD={}", detail::bulk_fd_in_worker));
    env_store.push_back(fmt::format("SPECGEN_WORKER_BULK_BYTES={}", proc->bulk->size));
  }
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_store{config_.program};
  arg_store.insert(arg_store.end(), config_.args.begin(), config_.args.end());
  std::vector<char*> argv;
  for (auto& s : arg_store) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, config_.program.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  ::close(ep[1]);
  if (rc != 0)
    return fail(fmt::format("cannot start worker \"{}\": {}; check worker_config::program", config_.program,
                            std::strerror(rc)));
  proc->pid = pid;
  detail::set_nonblocking(proc->channel);
  detail::set_nonblocking(proc->err);
  {
    std::lock_guard st(state_mutex_);
    proc_ = std::move(proc);
  }

  auto gone = [&](std::string why) {
    std::string status = reap_locked();
    std::string m = fmt::format("worker \"{}\" did not start: {} ({}){}", config_.program, why, status, stderr_tail());
    std::lock_guard st(state_mutex_);
    proc_.reset();
    return fail(std::move(m));
  };
  auto r = wait_frame_locked(detail::steady::now() + config_.startup_timeout, false);
  switch (r.outcome) {
    case io_outcome::deadline:
      return gone(fmt::format("no hello within {:.3f} s (worker_config::startup_timeout)", to_seconds(config_.startup_timeout)));
    case io_outcome::closed:
    case io_outcome::cancelled: return gone("it exited before its hello");
    case io_outcome::garbage: return gone(r.detail);
    case io_outcome::message: break;
  }
  if (r.message.type != message_type::hello)
    return gone(fmt::format("its first message was {}, not hello", to_string(r.message.type)));
  auto body = decode_body(r.message.payload);
  if (!body) return gone(body.error().message);
  std::lock_guard st(state_mutex_);
  info_ = worker_info{.pid = pid, .hello = std::move(body->json)};
  ++stats_.spawns;
  return {};
}

std::string worker_host::reap_locked() {
  pid_t pid;
  {
    std::lock_guard st(state_mutex_);
    if (!proc_ || proc_->pid <= 0) return "no process";
    pid = proc_->pid;
  }
  // A worker whose channel closed is usually exiting on its own: give it a
  // moment so its own signal or status is reported, not our SIGKILL.
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 20 && got == 0; ++i) {
    got = ::waitpid(pid, &status, WNOHANG);
    if (got == 0) ::usleep(1000);
  }
  ::kill(-pid, SIGKILL);  // the group: helpers the worker started go too
  if (got == 0) {
    ::kill(pid, SIGKILL);
    while ((got = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
  }
  std::string what = got == pid ? detail::describe_status(pid, status) : fmt::format("worker pid {} could not be reaped", pid);
  proc_->drain_stderr();
  std::lock_guard st(state_mutex_);
  proc_->pid = -1;
  return what;
}

std::string worker_host::stderr_tail() const {
  if (!proc_ || proc_->err_tail.empty()) return "";
  return fmt::format("; worker stderr (last {} bytes):\n{}", proc_->err_tail.size(), proc_->err_tail);
}

worker_host::io_result worker_host::wait_frame_locked(detail::steady::time_point until, bool cancellable) {
  auto& p = *proc_;
  std::array<char, 65536> buf;
  while (true) {
    while (true) {
      auto f = p.decoder.next();
      if (!f) return {io_outcome::garbage, {}, f.error().message};
      if (!*f) break;
      if ((*f)->type != message_type::log) return {io_outcome::message, std::move(**f), {}};
      auto text = read_log(**f);
      if (!text) return {io_outcome::garbage, {}, text.error().message};
      p.keep_stderr(*text);
      p.keep_stderr("\n");
    }
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - detail::steady::now()).count();
    if (left <= 0) return {io_outcome::deadline, {}, {}};
    std::array<pollfd, 2> fds{pollfd{p.channel, POLLIN, 0}, pollfd{p.err, POLLIN, 0}};
    int n = ::poll(fds.data(), p.err >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (n < 0 && errno != EINTR) return {io_outcome::closed, {}, std::strerror(errno)};
    if (n <= 0) continue;
    if (p.err >= 0 && fds[1].revents) p.drain_stderr();
    if (fds[0].revents) {
      ssize_t got = ::recv(p.channel, buf.data(), buf.size(), 0);
      if (got > 0) {
        p.decoder.feed(std::string_view(buf.data(), static_cast<std::size_t>(got)));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
        std::lock_guard st(state_mutex_);
        return {cancellable && cancel_requested_ ? io_outcome::cancelled : io_outcome::closed, {}, {}};
      }
    }
  }
}

worker_failure worker_host::replace_locked(worker_failure::kind k, std::string what) {
  auto t0 = detail::steady::now();
  std::string status = reap_locked();
  std::string message = fmt::format("{} ({}){}", what, status, stderr_tail());
  {
    std::lock_guard st(state_mutex_);
    proc_.reset();
    switch (k) {
      case worker_failure::kind::timeout: ++stats_.timeouts; break;
      case worker_failure::kind::crashed: ++stats_.crashes; break;
      case worker_failure::kind::protocol_error: ++stats_.protocol_errors; break;
      case worker_failure::kind::cancelled: ++stats_.cancellations; break;
      case worker_failure::kind::spawn_failed: break;
    }
  }
  auto s = spawn_locked();
  std::lock_guard st(state_mutex_);
  if (s) {
    ++stats_.respawns;
    stats_.last_respawn_seconds = std::chrono::duration<double>(detail::steady::now() - t0).count();
  } else {
    message += fmt::format("; the replacement failed too: {}", s.error().message);
  }
  return {k, std::move(message)};
}

expected<response, worker_failure> worker_host::call(const request& r, duration deadline) {
  auto until = detail::steady::now() + std::chrono::duration_cast<detail::steady::duration>(deadline);
  std::unique_lock io(io_mutex_, std::defer_lock);
  if (!io.try_lock_until(until))
    return unexpected(worker_failure{worker_failure::kind::timeout,
                                     fmt::format("the worker stayed busy for the whole {:.3f} s deadline", to_seconds(deadline))});
  if (!proc_) {
    auto s = spawn_locked();
    if (!s) return unexpected(s.error());
  }
  std::uint64_t id;
  {
    std::lock_guard st(state_mutex_);
    id = next_id_++;
    in_call_ = true;
    cancel_requested_ = false;
  }
  auto finish = [&](worker_failure::kind k, std::string what) -> expected<response, worker_failure> {
    bool cancelled;
    {
      std::lock_guard st(state_mutex_);
      in_call_ = false;
      cancelled = cancel_requested_;
    }
    if (cancelled) {
      k = worker_failure::kind::cancelled;
      what = fmt::format("request \"{}\" was cancelled", r.op);
    }
    return unexpected(replace_locked(k, std::move(what)));
  };

  if (!proc_->send_all(encode(make_request(id, r)), until))
    return finish(worker_failure::kind::crashed, fmt::format("could not send request \"{}\" to the worker", r.op));
  while (true) {
    auto got = wait_frame_locked(until, true);
    switch (got.outcome) {
      case io_outcome::deadline:
        return finish(worker_failure::kind::timeout,
                      fmt::format("no response to \"{}\" within {:.3f} s; the worker was killed", r.op, to_seconds(deadline)));
      case io_outcome::closed:
        return finish(worker_failure::kind::crashed, fmt::format("the worker died during \"{}\"", r.op));
      case io_outcome::cancelled:
        return finish(worker_failure::kind::cancelled, fmt::format("request \"{}\" was cancelled", r.op));
      case io_outcome::garbage:
        return finish(worker_failure::kind::protocol_error,
                      fmt::format("the worker broke the protocol during \"{}\": {}", r.op, got.detail));
      case io_outcome::message: break;
    }
    const frame& f = got.message;
    if (f.type == message_type::pong) continue;  // a late answer to a heartbeat
    if (f.type != message_type::response || f.request_id != id)
      return finish(worker_failure::kind::protocol_error,
                    fmt::format("the worker sent {} (id {}) while request {} \"{}\" was pending", to_string(f.type),
                                f.request_id, id, r.op));
    auto resp = read_response(f);
    if (!resp)
      return finish(worker_failure::kind::protocol_error,
                    fmt::format("the worker's response to \"{}\" is malformed: {}", r.op, resp.error().message));
    if (resp->bulk) {
      // The binary part waits in the bulk region until the next request; it
      // is read there, in place (see response::bulk_bytes).
      if (!proc_->bulk || resp->bulk > proc_->bulk->size)
        return finish(worker_failure::kind::protocol_error,
                      fmt::format("the worker's response to \"{}\" puts {} bytes in a bulk region of {} bytes", r.op,
                                  resp->bulk, proc_->bulk ? proc_->bulk->size : 0));
      resp->bulk_bytes = std::string_view(proc_->bulk->data, static_cast<std::size_t>(resp->bulk));
      resp->keep = proc_->bulk;
      std::lock_guard st(state_mutex_);
      stats_.bulk_bytes += resp->bulk;
    }
    std::lock_guard st(state_mutex_);
    in_call_ = false;
    if (cancel_requested_) {
      // cancel() already killed it; the answer raced the kill. Report what
      // the caller asked for and replace the worker like any cancellation.
      cancel_requested_ = false;
      in_call_ = true;
      break;
    }
    return *std::move(resp);
  }
  return finish(worker_failure::kind::cancelled, fmt::format("request \"{}\" was cancelled", r.op));
}

bool worker_host::cancel() {
  std::lock_guard st(state_mutex_);
  if (!in_call_ || !proc_ || proc_->pid <= 0) return false;
  cancel_requested_ = true;
  ::kill(-proc_->pid, SIGKILL);
  ::kill(proc_->pid, SIGKILL);
  return true;
}

bool worker_host::alive() const {
  std::lock_guard st(state_mutex_);
  return proc_ && proc_->pid > 0;
}

worker_info worker_host::info() const {
  std::lock_guard st(state_mutex_);
  return info_;
}

worker_stats worker_host::stats() const {
  std::lock_guard st(state_mutex_);
  return stats_;
}

void worker_host::heartbeat_loop() {
  while (true) {
    {
      std::unique_lock hb(hb_mutex_);
      if (hb_cv_.wait_for(hb, config_.heartbeat_interval, [&] { return hb_stop_; })) return;
    }
    std::unique_lock io(io_mutex_, std::try_to_lock);
    if (!io) continue;  // a call is running: its deadline watches the worker
    if (!proc_) {
      (void)spawn_locked();  // a failed respawn is retried at every beat
      continue;
    }
    std::uint64_t id;
    {
      std::lock_guard st(state_mutex_);
      id = next_id_++;
    }
    auto until = detail::steady::now() + std::chrono::duration_cast<detail::steady::duration>(config_.heartbeat_timeout);
    if (!proc_->send_all(encode({message_type::ping, id, {}}), until)) {
      replace_locked(worker_failure::kind::crashed, "the idle worker stopped reading");
      continue;
    }
    while (true) {
      auto got = wait_frame_locked(until, false);
      if (got.outcome == io_outcome::message && got.message.type == message_type::pong) {
        if (got.message.request_id == id) break;
        continue;  // an older beat's pong
      }
      if (got.outcome == io_outcome::deadline) {
        replace_locked(worker_failure::kind::timeout,
                       fmt::format("the idle worker missed a heartbeat ({:.3f} s)", to_seconds(config_.heartbeat_timeout)));
        std::lock_guard st(state_mutex_);
        ++stats_.heartbeat_misses;  // after the replacement, so a reader seeing it sees the new worker
      } else if (got.outcome == io_outcome::message || got.outcome == io_outcome::garbage) {
        replace_locked(worker_failure::kind::protocol_error,
                       got.outcome == io_outcome::garbage
                           ? got.detail
                           : fmt::format("the idle worker sent an unexpected {}", to_string(got.message.type)));
      } else {
        replace_locked(worker_failure::kind::crashed, "the idle worker died");
      }
      break;
    }
  }
}

void worker_host::stop_heartbeat() {
  {
    std::lock_guard hb(hb_mutex_);
    hb_stop_ = true;
  }
  hb_cv_.notify_all();
  if (hb_thread_.joinable()) hb_thread_.join();
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
