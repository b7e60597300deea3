#include <specgen/gpu/compiler.hpp>

#include "disk_cache.hpp"
#include "nvrtc_loader.hpp"
#include "thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <future>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

#ifndef SPECGEN_CUDA_INCLUDE_DIR
#define SPECGEN_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

SPECGEN_BEGIN_NAMESPACE
namespace gpu {
namespace detail {
namespace {

using result = compiler::result;

compile_failure failure(compile_failure_kind kind, std::string message, std::string log = {}) {
  return compile_failure{.kind = kind, .message = std::move(message), .log = std::move(log)};
}

/// FNV-1a over 128 bits. Not cryptographic: the key guards against accidental
/// collisions between sources, where 128 bits make one practically impossible;
/// each field is length-prefixed so ("ab","c") and ("a","bc") differ.
class fnv1a_128 {
 public:
  fnv1a_128& add(std::string_view field) {
    std::uint64_t n = field.size();
    for (int i = 0; i < 8; ++i, n >>= 8) byte(static_cast<unsigned char>(n & 0xff));
    for (unsigned char c : field) byte(c);
    return *this;
  }
  [[nodiscard]] std::string hex() const {
    return fmt::format("{:016x}{:016x}", static_cast<std::uint64_t>(h_ >> 64), static_cast<std::uint64_t>(h_));
  }

 private:
  __extension__ using u128 = unsigned __int128;
  void byte(unsigned char c) {
    h_ ^= c;
    h_ *= prime_;
  }
  static constexpr u128 prime_ = (u128{1} << 88) | 0x13b;
  u128 h_ = (u128{0x6c62272e07bb0142ull} << 64) | 0x62b821756295c58dull;
};

std::string resolve_toolkit_include(const compiler_config& config) {
  if (!config.toolkit_include_dir.empty()) return config.toolkit_include_dir;
  if (const char* env = std::getenv("SPECGEN_CUDA_INCLUDE_DIR"); env && *env) return env;
  return SPECGEN_CUDA_INCLUDE_DIR;
}

bool has_std_option(const std::vector<std::string>& options) {
  for (const auto& o : options)
    if (o.starts_with("--std") || o.starts_with("-std")) return true;
  return false;
}

/// Cancels NVRTC once the deadline passes. NVRTC may call this from its own
/// threads, and wants the answer to stay 1 once it was 1.
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

/// The first line of the log that reports an error, for a one-line message.
std::string first_error_line(const std::string& log) {
  std::string_view rest = log;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    if (line.find("error") != std::string_view::npos) return std::string(line);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
  }
  return "see the log";
}

}  // namespace

struct compiler_state {
  compiler_config config;
  std::string toolkit_include;
  std::optional<disk_cache> disk;

  mutable std::mutex mutex;
  using entry = std::pair<std::string, std::shared_ptr<const compiled>>;
  std::list<entry> lru;  // most recent first
  std::unordered_map<std::string, std::list<entry>::iterator> index;
  std::unordered_map<std::string, std::shared_future<result>> in_flight;
  compiler_stats stats;

  thread_pool pool;  // last: its threads stop before the members they use are destroyed

  explicit compiler_state(compiler_config c)
      : config(std::move(c)), toolkit_include(resolve_toolkit_include(config)), pool(config.threads) {
    if (!config.cache_dir.empty()) disk.emplace(config.cache_dir);
  }

  /// Every NVRTC option of a compile, defaults included: the key hashes exactly this.
  [[nodiscard]] std::vector<std::string> nvrtc_options(const compile_options& o) const {
    std::vector<std::string> opts{"--gpu-architecture=" + o.arch, "-default-device", "--ptxas-options=-v"};
    if (!has_std_option(o.options)) opts.emplace_back("--std=c++20");
    if (o.line_info) opts.emplace_back("-lineinfo");
    for (const auto& d : o.include_dirs) opts.push_back("-I" + d);
    opts.push_back("-I" + toolkit_include);
    // CUDA 13 moved libcu++/CUB/Thrust (cuda/std/...) under include/cccl.
    if (std::error_code ec; std::filesystem::is_directory(toolkit_include + "/cccl", ec))
      opts.push_back("-I" + toolkit_include + "/cccl");
    opts.insert(opts.end(), o.options.begin(), o.options.end());
    return opts;
  }

  [[nodiscard]] static std::string key_of(const nvrtc_api& api, const std::vector<std::string>& opts,
                                          std::string_view source) {
    fnv1a_128 h;
    h.add("specgen-nvrtc-cubin-v1").add(api.version_string);
    for (const auto& o : opts) h.add(o);
    return h.add(source).hex();
  }

  result run_nvrtc(const nvrtc_api& api, std::string_view source, const compile_options& o,
                   const std::vector<std::string>& opts, const std::string& key) {
    nvrtcProgram prog = nullptr;
    const std::string src(source);  // NVRTC wants a NUL-terminated string
    if (auto rc = api.create_program(&prog, src.c_str(), "candidate.cu", 0, nullptr, nullptr); rc != NVRTC_SUCCESS)
      return unexpected(failure(compile_failure_kind::internal,
                                fmt::format("nvrtcCreateProgram failed: {}", api.get_error_string(rc))));
    struct destroy {
      const nvrtc_api& api;
      nvrtcProgram& p;
      ~destroy() { api.destroy_program(&p); }
    } destroy_on_exit{api, prog};

    // Clamped so a "never" deadline (duration::max()) cannot overflow the time point.
    const auto budget = std::min<duration>(o.deadline, std::chrono::hours(24));
    flow_guard guard{.deadline = std::chrono::steady_clock::now() + budget};
    api.set_flow_callback(prog, &flow_guard::callback, &guard);

    std::vector<const char*> argv;
    argv.reserve(opts.size());
    for (const auto& s : opts) argv.push_back(s.c_str());

    const auto t0 = std::chrono::steady_clock::now();
    const nvrtcResult rc = api.compile_program(prog, static_cast<int>(argv.size()), argv.data());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard lock(mutex);
      ++stats.compilations;
    }

    std::string log;
    if (std::size_t n = 0; api.get_program_log_size(prog, &n) == NVRTC_SUCCESS && n > 1) {
      log.resize(n);
      if (api.get_program_log(prog, log.data()) != NVRTC_SUCCESS) log.clear();
      while (!log.empty() && log.back() == '\0') log.pop_back();
    }

    if (rc == NVRTC_ERROR_CANCELLED || guard.expired.load())
      return unexpected(failure(
          compile_failure_kind::timeout,
          fmt::format("compilation was cancelled at its deadline of {:.1f} s; simplify the source (deep template "
                      "recursion or long constexpr evaluation?) or raise compile_options::deadline",
                      to_seconds(o.deadline)),
          std::move(log)));
    if (rc == NVRTC_ERROR_COMPILATION || rc == NVRTC_ERROR_INVALID_OPTION) {
      auto what = rc == NVRTC_ERROR_COMPILATION ? first_error_line(log)
                                                : fmt::format("invalid option among: {}", fmt::join(opts, " "));
      return unexpected(failure(compile_failure_kind::compile_error,
                                fmt::format("NVRTC rejected the source: {}", what), std::move(log)));
    }
    if (rc != NVRTC_SUCCESS)
      return unexpected(failure(compile_failure_kind::internal,
                                fmt::format("nvrtcCompileProgram failed: {}", api.get_error_string(rc)),
                                std::move(log)));

    std::size_t size = 0;
    if (api.get_cubin_size(prog, &size) != NVRTC_SUCCESS || size == 0)
      return unexpected(failure(compile_failure_kind::internal,
                                fmt::format("NVRTC produced no cubin for arch '{}'", o.arch), std::move(log)));
    auto c = std::make_shared<compiled>();
    c->cubin.resize(size);
    if (auto r = api.get_cubin(prog, reinterpret_cast<char*>(c->cubin.data())); r != NVRTC_SUCCESS)
      return unexpected(failure(compile_failure_kind::internal,
                                fmt::format("nvrtcGetCUBIN failed: {}", api.get_error_string(r)), std::move(log)));
    c->kernels = parse_ptxas_info(log);
    c->log = std::move(log);
    c->seconds = secs;
    c->key = key;
    return std::shared_ptr<const compiled>(std::move(c));
  }

  void remember(const std::string& key, std::shared_ptr<const compiled> c) {  // holds `mutex`
    if (config.memory_entries == 0) return;
    if (auto it = index.find(key); it != index.end()) lru.erase(it->second);
    lru.emplace_front(key, std::move(c));
    index[key] = lru.begin();
    while (lru.size() > config.memory_entries) {
      index.erase(lru.back().first);
      lru.pop_back();
    }
  }

  expected<std::pair<const nvrtc_api*, std::vector<std::string>>, compile_failure> prepare(
      const compile_options& o) const {
    const auto& api = load_nvrtc();
    if (!api) return unexpected(failure(compile_failure_kind::unavailable, api.error().message));
    if (!o.arch.starts_with("sm_"))
      return unexpected(failure(compile_failure_kind::compile_error,
                                fmt::format("arch must name a real architecture such as 'sm_90a' (a cubin is "
                                            "built for it), not '{}'",
                                            o.arch)));
    return std::pair{*api, nvrtc_options(o)};
  }

  result compile(std::string_view source, const compile_options& o) {
    auto prepared = prepare(o);
    if (!prepared) return unexpected(prepared.error());
    const auto& [api, opts] = *prepared;
    const std::string key = key_of(*api, opts, source);

    std::promise<result> promise;
    {
      std::unique_lock lock(mutex);
      if (auto it = index.find(key); it != index.end()) {
        lru.splice(lru.begin(), lru, it->second);
        ++stats.memory_hits;
        return it->second->second;
      }
      if (auto it = in_flight.find(key); it != in_flight.end()) {
        auto shared = it->second;
        ++stats.joined;
        lock.unlock();
        return shared.get();
      }
      in_flight.emplace(key, promise.get_future().share());
    }

    // This call owns the key: every path below must publish to the waiters.
    result mine = unexpected(failure(compile_failure_kind::internal, "unreachable"));
    result theirs = mine;
    bool disk_hit = false;
    try {
      std::shared_ptr<compiled> from_disk = disk ? disk->load(key) : nullptr;
      if (from_disk) {
        disk_hit = true;
        mine = theirs = std::shared_ptr<const compiled>(std::move(from_disk));
      } else {
        mine = run_nvrtc(*api, source, o, opts, key);
        if (mine) {
          if (disk) disk->store(**mine);
          auto hit = std::make_shared<compiled>(**mine);
          hit->cache_hit = true;
          theirs = std::shared_ptr<const compiled>(std::move(hit));
        } else {
          theirs = mine;
        }
      }
    } catch (const std::exception& e) {
      mine = theirs = unexpected(failure(compile_failure_kind::internal, fmt::format("compile failed: {}", e.what())));
    }
    {
      std::lock_guard lock(mutex);
      if (theirs) {
        if (disk_hit) ++stats.disk_hits;
        remember(key, *theirs);
      }
      in_flight.erase(key);
    }
    promise.set_value(theirs);
    return mine;
  }
};

}  // namespace detail

compiler::compiler(compiler_config config) : state_(std::make_unique<detail::compiler_state>(std::move(config))) {}
compiler::~compiler() = default;

compiler::result compiler::compile(std::string_view source, const compile_options& options) {
  return state_->compile(source, options);
}

void compiler::compile_async(std::string source, compile_options options, std::function<void(result)> done) {
  auto shared_done = std::make_shared<std::function<void(result)>>(std::move(done));
  state_->pool.submit(detail::thread_pool::job{
      .run = [state = state_.get(), source = std::move(source), options = std::move(options),
              shared_done] { (*shared_done)(state->compile(source, options)); },
      .abandon =
          [shared_done] {
            (*shared_done)(unexpected(detail::failure(compile_failure_kind::internal,
                                                      "the compiler was destroyed before this compile started")));
          },
  });
}

expected<std::string, compile_failure> compiler::cache_key(std::string_view source,
                                                           const compile_options& options) const {
  auto prepared = state_->prepare(options);
  if (!prepared) return unexpected(prepared.error());
  return detail::compiler_state::key_of(*prepared->first, prepared->second, source);
}

compiler_stats compiler::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

const compiler_config& compiler::config() const noexcept { return state_->config; }

expected<std::string, compile_failure> compiler::nvrtc_version() {
  const auto& api = detail::load_nvrtc();
  if (!api) return unexpected(detail::failure(compile_failure_kind::unavailable, api.error().message));
  return (*api)->version_string;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
