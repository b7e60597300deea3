#pragma once
// What the worker's "run" and "profile" operations share: reading the
// request, modules by key, and the task's guarded buffers with their poison,
// guard and input checks. Layouts are documented in docs/gpu-runtime.md.
#include "executor.hpp"
#include "worker_state.hpp"

#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/protocol.hpp>
#include <specgen/gpu/runtime.hpp>
#include <specgen/task.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// A failed operation as the response carries it.
struct failure {
  std::string kind;  ///< a runtime_error kind, "invalid_request" or "module_missing"
  std::string message;
  std::string cuda_error{};
  std::string module_key{};  ///< module_missing: the key the worker lacks
};

failure from(const runtime_error& e);
failure bad_request(std::string message);

/// `{"ok": false, "error_kind", "message", "cuda_error"}` (+ "module_key" for module_missing).
nlohmann::json failed(const failure& f);

/// The request's binary part as bytes.
std::span<const std::byte> binary_of(const request& r);

/// `{"offset", "length"}` inside `binary`, as a sub-span.
expected<std::span<const std::byte>, failure> read_slice(const nlohmann::json& j, std::span<const std::byte> binary,
                                                         const std::string& what);

expected<task, failure> read_task(const nlohmann::json& j);
expected<shape_binding, failure> read_shape(const nlohmann::json& j);
/// A non-negative number of milliseconds under `key` (default `fallback_ms`).
expected<duration, failure> read_ms(const nlohmann::json& args, const char* key, double fallback_ms);
/// An unsigned integer under `key`, or `fallback`.
expected<std::uint64_t, failure> read_u64(const nlohmann::json& args, const char* key, std::uint64_t fallback);

/// Elements and bytes of a task tensor at `shape`.
struct tensor_size {
  std::int64_t elements = 0;
  std::size_t bytes = 0;
};
expected<tensor_size, failure> size_at(const tensor_spec& t, const shape_binding& shape);

/**
 * The module a request names: `{"cubin": {"offset", "length"}?, "module_key"?}`
 * in `where`. A key already loaded is used as it is (its cubin, if sent, is
 * not loaded again); a cubin with a key is loaded and kept under it; a key
 * without a cubin that is not loaded is `module_missing`. A cubin with
 * writable `__device__` globals (cubin_info.hpp), or one the ELF reader cannot
 * read, keeps its bytes for a fresh module instance per run.
 */
expected<std::shared_ptr<loaded_module>, failure> acquire_module(worker_state& w, gpu_context& ctx, const nlohmann::json& where,
                                                          std::span<const std::byte> binary, const std::string& what);

/// One task buffer on the device.
struct io_buffer {
  std::string name;
  dtype type = dtype::f32;
  device_buffer buffer;
  std::uint64_t checksum = 0;  ///< inputs: of the bytes uploaded last
};

/// What the guard and input checks found after a run.
struct run_check {
  bool guards_intact = true;
  nlohmann::json guards_broken = nlohmann::json::array();
  bool inputs_intact = true;
  nlohmann::json inputs_changed = nlohmann::json::array();
};

/**
 * Every input and output of a task at one shape, each between guard zones,
 * and the poison its outputs get before every run: a byte (`cuMemsetD8Async`)
 * or, by default, each output dtype's `poison_pattern` uploaded once into a
 * source buffer per dtype and copied device-to-device (`cuMemcpyDtoDAsync`).
 * Fills and copies are queued on the context's stream; uploads go through
 * the legacy stream, so `settle` must run between uploads and launches.
 */
class io_set {
 public:
  static expected<io_set, failure> allocate(gpu_context& ctx, const task& t, const shape_binding& shape,
                                            std::size_t guard, std::byte guard_pattern, std::optional<std::byte> poison);

  std::vector<io_buffer>& inputs() noexcept { return inputs_; }
  std::vector<io_buffer>& outputs() noexcept { return outputs_; }
  [[nodiscard]] buffer_pointers pointers() const;

  /// Copies `bytes` into input `i` and records their checksum.
  expected<void, failure> upload_input(std::size_t i, std::span<const std::byte> bytes);
  /// Generates input `i` with `make_input(spec, elements, seed, dist)` and uploads it.
  expected<void, failure> generate_input(std::size_t i, const tensor_spec& spec, std::uint64_t seed,
                                         std::optional<distribution> dist);
  /// Fills every guard zone with the guard pattern.
  expected<void, failure> fill_guards();
  /// Queues the poison of every output on the context's stream.
  expected<void, failure> poison_outputs_async();
  /// Waits for everything queued so far (uploads, fills, copies): call only
  /// when no plan is running.
  expected<void, failure> settle();
  /// Reads every guard zone and every input's checksum.
  expected<run_check, failure> check();
  /// Downloads the outputs named in `names` (all when empty), appends them to
  /// `binary` and returns their `[{"name", "offset", "length"}]`.
  expected<nlohmann::json, failure> append_outputs(const std::vector<std::string>& names, std::string& binary);

 private:
  io_set() = default;
  gpu_context* ctx_ = nullptr;
  std::vector<io_buffer> inputs_, outputs_;
  std::byte guard_pattern_{0xA5};
  std::optional<std::byte> poison_byte_{};
  std::map<dtype, device_buffer> poison_sources_{};  // default poison: one pattern buffer per output dtype
};

/// `{"guards_intact", "guards_broken", "inputs_intact", "inputs_changed"}` into `out`.
void put_check(nlohmann::json& out, const run_check& c);

/// `{"index", "name", "arch"}` of the worker's GPU.
nlohmann::json device_json(const gpu_context& ctx);

/// The op's reply: `result` and the binary part on success, the failure
/// otherwise; `ok: true` at the protocol level either way (the worker answered).
response reply_from(expected<nlohmann::json, failure> result, std::string binary);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
