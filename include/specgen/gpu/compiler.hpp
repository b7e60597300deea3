#pragma once
/// Runtime compilation of candidate kernels with NVRTC, behind a two-level cache.
///
/// NVRTC is loaded with dlopen at the first compile, so a program linking this
/// library starts on a machine without the CUDA Toolkit and gets
/// `compile_failure_kind::unavailable` instead of failing to load. No CUDA type
/// appears here.
///
/// Sources are untrusted: every compile runs in a helper process
/// (`specgen-nvrtc`) with an empty environment that can read the CUDA
/// Toolkit's include directory and the caller's `include_dirs`, and nothing
/// else; it can write, remove and execute nothing. A source that includes
/// `/etc/passwd` or `/proc/self/environ` fails to compile as if the file did
/// not exist (docs/evaluation.md, "Trust boundary").
///
/// @code
///   specgen::gpu::compiler nvrtc({.cache_dir = "/tmp/specgen-cubins"});
///   auto r = nvrtc.compile(R"(extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2; })",
///                          {.arch = "sm_90a", .deadline = specgen::seconds(5)});
///   if (!r) std::cerr << r.error().message << '\n' << r.error().log;
///   else std::cout << (*r)->kernels[0].registers << " registers\n";
/// @endcode
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/json.hpp>
#include <specgen/types.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

/// What one compilation is asked to do. Everything here except `deadline`
/// changes the output, so everything except `deadline` is part of the cache key.
struct compile_options {
  std::string arch = "sm_90a";             ///< a real architecture (sm_XX[a]); NVRTC must emit a cubin
  std::vector<std::string> options{};      ///< extra NVRTC options, e.g. "-use_fast_math", "--std=c++17"
  /// Searched before the toolkit's own include dirs, and the only other
  /// directories a source can read (an `-I` in `options` is searched, but
  /// its files cannot be read).
  std::vector<std::string> include_dirs{};
  duration deadline = seconds(20);         ///< NVRTC is cancelled past this, so no source stalls a search
  bool line_info = true;                   ///< -lineinfo, so profiles map back to source lines
  friend bool operator==(const compile_options&, const compile_options&) = default;
};

/// How a `compiler` caches and schedules.
struct compiler_config {
  /// Cubins on disk under here; empty: no disk cache. Created (mode 0700) if
  /// absent. A directory that another user owns, or that group or others may
  /// write, is refused: `compiler`'s constructor throws std::invalid_argument
  /// saying why. Every entry is checked against a digest when read.
  std::string cache_dir{};
  std::size_t memory_entries = 256;  ///< compiled results kept in memory (LRU); 0: none
  unsigned threads = 0;              ///< compile_async workers; 0: one per hardware thread
  /// The CUDA Toolkit's include dir (cuda_fp16.h, cooperative_groups.h, cuda/std/...).
  /// Empty: $SPECGEN_CUDA_INCLUDE_DIR, else the toolkit found when specgen was built.
  std::string toolkit_include_dir{};
  /// The sandboxed NVRTC helper every compile runs in. Empty: $SPECGEN_NVRTC_HELPER,
  /// else specgen-nvrtc beside the running program, else the installed one, else the build tree's.
  std::string helper_program{};
  /// Address-space limit of each helper process, so a source that makes NVRTC
  /// allocate without bound fails to compile instead of exhausting the host. 0: none.
  std::uint64_t helper_memory_limit_bytes = std::uint64_t{16} << 30;
  friend bool operator==(const compiler_config&, const compiler_config&) = default;
};

/// Per-kernel resource use (feedback a model can act on), as the cubin
/// records it and, for the spills, as ptxas reports it.
struct kernel_resources {
  std::string name{};  ///< the entry point as ptxas names it (mangled unless extern "C")
  int registers = 0;   ///< per thread
  /// Bytes of local memory the spills write and read per thread: from ptxas's
  /// report in NVRTC's log only (the cubin does not record them), so 0 when
  /// the log has no report.
  int spill_stores_bytes = 0;
  int spill_loads_bytes = 0;
  int static_smem_bytes = 0;  ///< `__shared__` variables, without the bytes the system reserves per block
  int stack_frame_bytes = 0;  ///< per thread: local arrays and spills
  friend bool operator==(const kernel_resources&, const kernel_resources&) = default;
};

/// A successful compilation (fresh, or from either cache level).
struct compiled {
  std::vector<std::byte> cubin{};
  std::string log{};                      ///< NVRTC's log (warnings and ptxas info), kept for feedback
  /// Every entry function the cubin defines, in the cubin's order, with its
  /// resources (`kernels_of_compile`): complete also when the log has no ptxas report.
  std::vector<kernel_resources> kernels{};
  double seconds = 0;                     ///< NVRTC wall time of the compile that produced the cubin
  bool cache_hit = false;                 ///< true when this call did not run NVRTC itself
  std::string key{};                      ///< the cache key (32 hex digits)
};

enum class compile_failure_kind : std::uint8_t {
  compile_error,  ///< NVRTC rejected the source or the options (log attached)
  timeout,        ///< cancelled at the deadline
  unavailable,    ///< NVRTC could not be loaded (no CUDA Toolkit on this machine)
  internal,       ///< NVRTC failed in a way the source does not explain
};

inline constexpr std::array<std::string_view, 4> compile_failure_kind_names{"compile_error", "timeout",
                                                                            "unavailable", "internal"};
constexpr std::string_view to_string(compile_failure_kind k) noexcept {
  return compile_failure_kind_names[static_cast<std::size_t>(k)];
}

struct compile_failure {
  compile_failure_kind kind = compile_failure_kind::internal;
  std::string message{};  ///< one line saying what happened and what to do
  std::string log{};      ///< NVRTC's log, when there is one
  friend bool operator==(const compile_failure&, const compile_failure&) = default;
};

/// Counters of a compiler's work since construction.
struct compiler_stats {
  std::uint64_t compilations = 0;  ///< NVRTC runs (successful or not)
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t joined = 0;        ///< calls that waited for the same key's compile in flight
  std::uint64_t helpers_started = 0;  ///< sandboxed NVRTC processes started
  std::uint64_t denied_file_accesses = 0;  ///< file-system calls the sandbox refused to sources
  std::uint64_t disk_entries_rejected = 0;  ///< disk cache entries that failed their checks (recompiled)
  friend bool operator==(const compiler_stats&, const compiler_stats&) = default;
};

/// Reads ptxas's `-v` report (which the compiler always requests) into one entry per
/// entry function, in the order ptxas compiled them.
/// @code
///   auto k = specgen::gpu::parse_ptxas_info("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
///                                           "ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem\n");
///   // k[0].registers == 10, k[0].static_smem_bytes == 256
/// @endcode
std::vector<kernel_resources> parse_ptxas_info(std::string_view log);

/**
 * Reads the entry functions (kernels) of a cubin and the resources it records
 * for each: registers per thread, static shared memory and stack frame. Spills
 * are not in a cubin and read 0. A cubin is a little-endian ELF64 image; every
 * offset and size in it is bounds-checked, so a truncated or malformed image is
 * an error message, never a crash.
 *
 * NVRTC writes the ptxas report into its log only when ptxas ran: a compile
 * that NVRTC answers from a cache of its own has an empty log, but its cubin
 * always says which kernels exist and what they use.
 * @code
 *   auto k = specgen::gpu::read_cubin_kernels(compiled.cubin);
 *   if (k) for (const auto& e : *k) std::cout << e.name << ": " << e.registers << " registers\n";
 * @endcode
 */
expected<std::vector<kernel_resources>> read_cubin_kernels(std::span<const std::byte> cubin);

/// The kernels of a compile: the cubin's entry functions and their resources
/// (the authority on which kernels exist), with the spills of the same-named
/// entries of `reported` (ptxas's report, `parse_ptxas_info`). Where the cubin
/// cannot be read, `reported` as it is.
std::vector<kernel_resources> kernels_of_compile(std::span<const std::byte> cubin,
                                                 const std::vector<kernel_resources>& reported);

/// The core's summary of a compile: the worst kernel's registers, spills and shared memory.
compile_report to_report(const compiled& c);

namespace detail {
struct compiler_state;
}

/**
 * Compiles CUDA C++ to a cubin with NVRTC; results are cached in memory (LRU)
 * and, with a `cache_dir`, on disk, keyed by everything that changes the output.
 * Thread-safe: concurrent compiles of one key run NVRTC once and the others wait.
 *
 * @code
 *   specgen::gpu::compiler c({.threads = 4});
 *   c.compile_async(source, {}, [&](specgen::gpu::compiler::result r) {
 *     loop.post([r = std::move(r)] { use(r); });  // `done` runs on a compiler thread
 *   });
 * @endcode
 */
class compiler {
 public:
  using result = expected<std::shared_ptr<const compiled>, compile_failure>;

  explicit compiler(compiler_config config = {});
  ~compiler();  // waits for running compiles; queued ones get an `internal` failure
  compiler(const compiler&) = delete;  // the pool's threads point into this object
  compiler& operator=(const compiler&) = delete;

  result compile(std::string_view source, const compile_options& options = {});

  /// Compiles on the pool. `done` is called exactly once, on a pool thread (or,
  /// for a compile still queued when the compiler is destroyed, on that thread).
  void compile_async(std::string source, compile_options options, std::function<void(result)> done);

  /// The key `compile` would use: a 128-bit FNV-1a of the NVRTC version, the full
  /// option list (architecture, include dirs, defaults) and the source, in hex.
  [[nodiscard]] expected<std::string, compile_failure> cache_key(std::string_view source,
                                                                  const compile_options& options = {}) const;

  [[nodiscard]] compiler_stats stats() const;
  [[nodiscard]] const compiler_config& config() const noexcept;
  /// How compiles are isolated, as the first sandboxed process reported it
  /// (whether the kernel's Landlock enforces the boundary as well as the file
  /// guard); empty before the first compile that ran NVRTC.
  [[nodiscard]] std::string sandbox() const;

  /// "major.minor" of the NVRTC that would be used (loading it if needed).
  static expected<std::string, compile_failure> nvrtc_version();

 private:
  std::unique_ptr<detail::compiler_state> state_;
};

// ---- JSON (conventions of specgen/json.hpp) -------------------------------------------

inline void to_json(nlohmann::json& j, const compile_options& o) {
  j = {{"arch", o.arch},
       {"options", o.options},
       {"include_dirs", o.include_dirs},
       {"deadline_ns", o.deadline.count()},
       {"line_info", o.line_info}};
}
inline void from_json(const nlohmann::json& j, compile_options& o) {
  specgen::detail::read(j, "arch", o.arch);
  specgen::detail::read(j, "options", o.options);
  specgen::detail::read(j, "include_dirs", o.include_dirs);
  specgen::detail::read(j, "deadline_ns", o.deadline);
  specgen::detail::read(j, "line_info", o.line_info);
}

inline void to_json(nlohmann::json& j, const compiler_config& c) {
  j = {{"cache_dir", c.cache_dir},
       {"memory_entries", c.memory_entries},
       {"threads", c.threads},
       {"toolkit_include_dir", c.toolkit_include_dir},
       {"helper_program", c.helper_program},
       {"helper_memory_limit_bytes", c.helper_memory_limit_bytes}};
}
inline void from_json(const nlohmann::json& j, compiler_config& c) {
  specgen::detail::read(j, "cache_dir", c.cache_dir);
  specgen::detail::read(j, "memory_entries", c.memory_entries);
  specgen::detail::read(j, "threads", c.threads);
  specgen::detail::read(j, "toolkit_include_dir", c.toolkit_include_dir);
  specgen::detail::read(j, "helper_program", c.helper_program);
  specgen::detail::read(j, "helper_memory_limit_bytes", c.helper_memory_limit_bytes);
}

inline void to_json(nlohmann::json& j, const kernel_resources& k) {
  j = {{"name", k.name},
       {"registers", k.registers},
       {"spill_stores_bytes", k.spill_stores_bytes},
       {"spill_loads_bytes", k.spill_loads_bytes},
       {"static_smem_bytes", k.static_smem_bytes},
       {"stack_frame_bytes", k.stack_frame_bytes}};
}
inline void from_json(const nlohmann::json& j, kernel_resources& k) {
  specgen::detail::read(j, "name", k.name);
  specgen::detail::read(j, "registers", k.registers);
  specgen::detail::read(j, "spill_stores_bytes", k.spill_stores_bytes);
  specgen::detail::read(j, "spill_loads_bytes", k.spill_loads_bytes);
  specgen::detail::read(j, "static_smem_bytes", k.static_smem_bytes);
  specgen::detail::read(j, "stack_frame_bytes", k.stack_frame_bytes);
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
