// specgen-nvrtc: compiles untrusted CUDA sources with NVRTC in a process that
// can read nothing but the headers it is allowed to include.
//
// Started by specgen's compiler (never by hand) as
//   specgen-nvrtc --library LIBNVRTC [--allow DIR]... [--memory-limit BYTES]
// (--no-landlock and --no-guard switch one layer of the sandbox off, so that
// tests can show that each layer holds on its own.)
// with an environment of the compiler's choosing (no credentials) and a
// socket on its standard input and output. In order it:
//   1. closes every other descriptor it inherited;
//   2. loads NVRTC and its builtins library by full path;
//   3. arms the file guard (file_guard.c) and applies Landlock, both allowing
//      reads below the --allow directories only; nothing can be written,
//      removed or executed;
//   4. compiles a trivial kernel, so the first real request is warm and a
//      sandbox that breaks NVRTC is reported at once;
//   5. sends a handshake frame, then answers requests until its input closes.
// The frames are described in wire.hpp; a request is {"options": [...],
// "deadline_ms": N} and the source; a reply is {"rc": N, "error": "...",
// "seconds": S, "cancelled": B, "denied": N}, the log and the cubin.
#include "gpu/loader/nvrtc.hpp"
#include "file_guard.h"
#include "landlock.hpp"
#include "wire.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

namespace gd = specgen::gpu::detail;
namespace wire = specgen::gpu::detail::sandbox_wire;
using json = nlohmann::json;

struct options {
  std::string library;
  std::vector<std::string> allow;
  std::uint64_t memory_limit = 0;
  bool landlock = true;
  bool guard = true;
};

/// Cancels NVRTC at the request's deadline (NVRTC polls this).
struct flow_guard {
  std::chrono::steady_clock::time_point deadline;
  std::atomic<bool> expired{false};
  static int callback(void* self, void*) {
    auto* g = static_cast<flow_guard*>(self);
    if (g->expired.load(std::memory_order_relaxed)) return 1;
    if (std::chrono::steady_clock::now() < g->deadline) return 0;
    g->expired.store(true, std::memory_order_relaxed);
    return 1;
  }
};

struct outcome {
  nvrtcResult rc = NVRTC_SUCCESS;
  std::string log;
  std::string cubin;
  double seconds = 0;
  bool cancelled = false;
};

outcome compile(const gd::nvrtc_api& api, const std::string& source, const std::vector<std::string>& opts,
                std::chrono::milliseconds budget) {
  outcome out;
  nvrtcProgram prog = nullptr;
  if (out.rc = api.create_program(&prog, source.c_str(), "candidate.cu", 0, nullptr, nullptr); out.rc != NVRTC_SUCCESS)
    return out;
  flow_guard guard{.deadline = std::chrono::steady_clock::now() + budget};
  api.set_flow_callback(prog, &flow_guard::callback, &guard);
  std::vector<const char*> argv;
  argv.reserve(opts.size());
  for (const auto& o : opts) argv.push_back(o.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  out.rc = api.compile_program(prog, static_cast<int>(argv.size()), argv.data());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.cancelled = out.rc == NVRTC_ERROR_CANCELLED || guard.expired.load();
  if (std::size_t n = 0; api.get_program_log_size(prog, &n) == NVRTC_SUCCESS && n > 1) {
    out.log.resize(n);
    if (api.get_program_log(prog, out.log.data()) != NVRTC_SUCCESS) out.log.clear();
    while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  }
  if (out.rc == NVRTC_SUCCESS) {
    std::size_t size = 0;
    if (api.get_cubin_size(prog, &size) == NVRTC_SUCCESS && size > 0) {
      out.cubin.resize(size);
      if (api.get_cubin(prog, out.cubin.data()) != NVRTC_SUCCESS) out.cubin.clear();
    }
  }
  api.destroy_program(&prog);
  return out;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// Inherited descriptors beyond the standard three could hand NVRTC a file
/// the sandbox never sees being opened; none are kept.
void close_inherited() {
  if (::syscall(SYS_close_range, 3, ~0u, 0) == 0) return;
  for (int fd = 3; fd < 65536; ++fd) ::close(fd);
}

int serve(int in, int out, const options& o) {
  auto fail = [&](const std::string& why) {
    wire::write_frame(out, dump(json{{"error", why}}));
    return 1;
  };

  const rlimit no_core{0, 0};  // a crash on a hostile source leaves no core file of the sources it saw
  ::setrlimit(RLIMIT_CORE, &no_core);
  if (o.memory_limit > 0) {
    const rlimit as{o.memory_limit, o.memory_limit};
    if (::setrlimit(RLIMIT_AS, &as) != 0) return fail("cannot set the helper's memory limit (setrlimit RLIMIT_AS)");
  }
  auto api = gd::open_nvrtc({o.library});
  if (!api) return fail(api.error().message);

  // Relative paths resolve against "/", which the sandbox does not let NVRTC read.
  if (::chdir("/") != 0) return fail("cannot change to the root directory");
  std::vector<const char*> dirs;
  for (const auto& d : o.allow) dirs.push_back(d.c_str());
  const int roots = o.guard ? specgen_guard_arm(dirs.data(), dirs.size()) : -1;
  gd::landlock_outcome landlock{.abi = 0, .note = "switched off (--no-landlock)"};
  if (o.landlock) landlock = gd::restrict_to_reading(o.allow);

  const auto warm = compile(*api, "extern \"C\" __global__ void specgen_warmup() {}", {"-default-device"},
                            std::chrono::seconds(60));
  json hello{{"nvrtc", api->version_string},
             {"library", api->library},
             {"builtins", api->builtins},
             {"guard_roots", roots},
             {"landlock_abi", landlock.abi},
             {"landlock_note", landlock.note}};
  if (warm.rc != NVRTC_SUCCESS)
    hello["warmup_error"] = fmt::format("{}: {}", api->get_error_string(warm.rc), warm.log);
  if (!wire::write_frame(out, dump(hello))) return 1;

  std::string header_bytes, source;
  for (;;) {
    if (wire::read_frame(in, header_bytes, 1 << 20) != wire::read_status::ok) return 0;  // the compiler hung up
    if (wire::read_frame(in, source, wire::max_frame_bytes) != wire::read_status::ok) return 1;
    std::vector<std::string> opts;
    std::int64_t deadline_ms = 0;
    try {
      const auto header = json::parse(header_bytes);
      opts = header.at("options").get<std::vector<std::string>>();
      deadline_ms = header.at("deadline_ms").get<std::int64_t>();
    } catch (const std::exception& e) {
      return fail(fmt::format("bad request: {}", e.what()));
    }
    const unsigned long denied_before = specgen_guard_denied();
    const auto r = compile(*api, source, opts, std::chrono::milliseconds(std::max<std::int64_t>(deadline_ms, 1)));
    const json reply{{"rc", static_cast<int>(r.rc)},
                     {"error", api->get_error_string(r.rc)},
                     {"seconds", r.seconds},
                     {"cancelled", r.cancelled},
                     {"denied", specgen_guard_denied() - denied_before}};
    if (!wire::write_frame(out, dump(reply)) || !wire::write_frame(out, r.log) || !wire::write_frame(out, r.cubin))
      return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--library" && has_value) o.library = argv[++i];
    else if (a == "--allow" && has_value) o.allow.emplace_back(argv[++i]);
    else if (a == "--memory-limit" && has_value) o.memory_limit = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--no-landlock") o.landlock = false;
    else if (a == "--no-guard") o.guard = false;
    else {
      fmt::print(stderr, "specgen-nvrtc: unknown argument '{}'; this program is started by specgen's compiler\n", a);
      return 2;
    }
  }
  // The channel moves off 0 and 1, which then lead nowhere, so nothing NVRTC
  // prints can corrupt a frame.
  close_inherited();
  const int in = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  const int out = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (in < 0 || out < 0) return 1;
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);
    ::close(null);
  }
  if (o.library.empty()) {
    wire::write_frame(out, dump(json{{"error", "no --library given"}}));
    return 2;
  }
  try {
    return serve(in, out, o);
  } catch (const std::exception& e) {
    wire::write_frame(out, dump(json{{"error", fmt::format("specgen-nvrtc: {}", e.what())}}));
    return 1;
  }
}
