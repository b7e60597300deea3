#include <specgen/gpu/compiler.hpp>

#include "disk_cache.hpp"
#include "hash128.hpp"
#include "gpu/common/bounded_cache.hpp"
#include "gpu/loader/nvrtc.hpp"
#include "sandbox/helper.hpp"
#include "thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
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
  std::string helper_program;
  std::optional<disk_cache> disk;
  helper_pool helpers;

  mutable std::mutex mutex;
  bounded_cache<std::shared_ptr<const compiled>> memory{{.max_entries = config.memory_entries}};  // LRU
  std::unordered_map<std::string, std::shared_future<result>> in_flight;
  compiler_stats stats;

  thread_pool pool;  // last: its threads stop before the members they use are destroyed

  explicit compiler_state(compiler_config c)
      : config(std::move(c)),
        toolkit_include(resolve_toolkit_include(config)),
        helper_program(find_nvrtc_helper(config.helper_program)),
        helpers(std::max<std::size_t>(2, config.threads ? config.threads : std::thread::hardware_concurrency())),
        pool(config.threads) {
    if (!config.cache_dir.empty()) {
      auto opened = disk_cache::open(config.cache_dir);
      if (!opened) throw std::invalid_argument(opened.error().message);
      disk.emplace(std::move(*opened));
    }
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
    hash128 h;
    h.add("specgen-nvrtc-cubin-v2").add(api.version_string);
    for (const auto& o : opts) h.add(o);
    return h.add(source).hex();
  }

  [[nodiscard]] helper_config helper_for(const nvrtc_api& api, const compile_options& o) const {
    helper_config h{.program = helper_program,
                    .library = api.library,
                    .allowed = {toolkit_include},
                    .memory_limit = config.helper_memory_limit_bytes};
    h.allowed.insert(h.allowed.end(), o.include_dirs.begin(), o.include_dirs.end());
    return h;
  }

  result run_nvrtc(const nvrtc_api& api, std::string_view source, const compile_options& o,
                   const std::vector<std::string>& opts, const std::string& key) {
    auto reply = helpers.compile(helper_for(api, o), source, opts, o.deadline);
    {
      std::lock_guard lock(mutex);
      ++stats.compilations;
      stats.helpers_started = helpers.started();
      if (reply) stats.denied_file_accesses += reply->denied;
    }
    if (!reply) return unexpected(reply.error());
    std::string& log = reply->log;
    const auto rc = static_cast<nvrtcResult>(reply->rc);

    if (rc == NVRTC_ERROR_CANCELLED || reply->cancelled)
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
                                fmt::format("nvrtcCompileProgram failed: {}", reply->rc_text), std::move(log)));
    if (reply->cubin.empty())
      return unexpected(failure(compile_failure_kind::internal,
                                fmt::format("NVRTC produced no cubin for arch '{}'", o.arch), std::move(log)));
    auto c = std::make_shared<compiled>();
    const auto* bytes = reinterpret_cast<const std::byte*>(reply->cubin.data());
    c->cubin.assign(bytes, bytes + reply->cubin.size());
    // The cubin says which kernels exist and what they use, also when NVRTC's
    // log has no ptxas report; the report adds the spills.
    c->kernels = kernels_of_compile(c->cubin, parse_ptxas_info(log));
    c->log = std::move(log);
    c->seconds = reply->seconds;
    c->key = key;
    return std::shared_ptr<const compiled>(std::move(c));
  }

  void remember(const std::string& key, std::shared_ptr<const compiled> c) {  // holds `mutex`
    if (config.memory_entries == 0) return;
    memory.put(key, std::move(c));
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
      if (auto* hit = memory.find(key)) {
        ++stats.memory_hits;
        return *hit;
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
      std::shared_ptr<compiled> from_disk;
      if (disk) {
        auto loaded = disk->load(key);
        if (loaded.rejected) {
          std::lock_guard lock(mutex);
          ++stats.disk_entries_rejected;
        }
        from_disk = std::move(loaded.entry);
      }
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
  return state_->prepare(options).transform([&](const auto& prepared) {
    return detail::compiler_state::key_of(*prepared.first, prepared.second, source);
  });
}

compiler_stats compiler::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

const compiler_config& compiler::config() const noexcept { return state_->config; }

std::string compiler::sandbox() const { return state_->helpers.sandbox(); }

expected<std::string, compile_failure> compiler::nvrtc_version() {
  const auto& api = detail::load_nvrtc();
  if (!api) return unexpected(detail::failure(compile_failure_kind::unavailable, api.error().message));
  return (*api)->version_string;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
