#pragma once
/// The remote KV store: KV blocks of reasoning prefixes kept in the memory the
/// evaluation GPUs leave free (and in pinned host memory below it), fetched by
/// forks in batched transfers instead of recomputed.
///
/// The store lives in the trusted host process that owns the GPU pool, never
/// in `specgen-worker` (which runs untrusted kernels and is killed and
/// respawned on faults). It implements the core's `kv_backing`, so
/// `backed_kv` over it is a KV policy of real memory for the unchanged engine;
/// `make_gpu_kv` builds one. Another process (an inference engine's) maps
/// blocks through CUDA IPC handles with `kv_client`. docs/kv-store.md has the
/// design: tiers, batching, integrity, memory pressure, IPC.
///
/// @code
///   using namespace specgen;
///   auto store = gpu::kv_store::create({.block_bytes = kv_model{}.bytes_per_block()});
///   if (!store) return fmt::print("{}\n", store.error().message);   // "no GPU: ..." without one
///   policy::any_kv kv = gpu::make_gpu_kv(*store, kv_model{});                // for engine_config::kv
///   pool_config.before_job = [s = *store](int device, std::uint64_t bytes) { s->make_room(device, bytes); };
/// @endcode
/// Implemented in src/gpu/kv/ (target `specgen::gpu_kv`). No CUDA type appears here.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/policy/kv.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

namespace detail {
#ifdef NDEBUG
inline constexpr bool kv_verify_default = false;
#else
inline constexpr bool kv_verify_default = true;
#endif
}  // namespace detail

/**
 * Where a store keeps blocks and how it moves them. Sizes are bytes.
 *
 * @code
 *   specgen::gpu::kv_store_config c{.devices = {1, 2}, .device_capacity_bytes = 16ull << 30, .verify = true};
 * @endcode
 */
struct kv_store_config {
  /// Bytes per block: `kv_model::bytes_per_block()`. A multiple of 16 (the
  /// gather moves 16-byte vectors).
  std::size_t block_bytes = kv_model{}.bytes_per_block();
  /// The GPUs whose spare memory holds blocks (CUDA ordinals); empty: every visible GPU.
  std::vector<int> devices{};
  /// Most the store allocates on one GPU (remote_gpu_tier's budget by default).
  std::uint64_t device_capacity_bytes = 32ull << 30;
  /// Free memory the store never allocates into on a GPU: the evaluation's
  /// headroom (contexts, a worker's buffers) beyond what `make_room` is asked for.
  std::uint64_t reserve_bytes = 4ull << 30;
  /// The pinned host tier below the GPUs: blocks evicted from a GPU move here
  /// and leave it least recently used first. 0: no host tier (evicted blocks are dropped).
  std::uint64_t host_capacity_bytes = 16ull << 30;
  /// The unit of allocation and release (rounded down to whole blocks, at least one).
  std::uint64_t slab_bytes = 256ull << 20;
  /// One staging chunk of a transfer (rounded down to whole blocks): a fetch
  /// gathers a chunk while the previous one is being copied; two per GPU.
  /// 0: the whole transfer as one gather and one copy.
  std::uint64_t chunk_bytes = 256ull << 20;
  /// Where `fetch` (the `kv_backing` call a lease makes) delivers: the GPU a
  /// model server would read the KV from; -1: host memory.
  int consumer_device = 0;
  /// Copy GPU to GPU directly where the GPUs allow it; false: always through
  /// pinned host memory (to measure that path, or where peer access is broken).
  bool peer_to_peer = true;
  /// A checksum per block, computed at put and checked at every fetch; a
  /// mismatch drops the block and fails the fetch (the fork recomputes). On
  /// by default in debug builds; the tests turn it on.
  bool verify = detail::kv_verify_default;
  /// After `make_room(device, bytes)` the store does not grow on that GPU into
  /// those bytes for this long, so the job it made room for can allocate them.
  double pressure_hold_seconds = 10;

  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("block_bytes", s.block_bytes);
    f("devices", s.devices);
    f("device_capacity_bytes", s.device_capacity_bytes);
    f("reserve_bytes", s.reserve_bytes);
    f("host_capacity_bytes", s.host_capacity_bytes);
    f("slab_bytes", s.slab_bytes);
    f("chunk_bytes", s.chunk_bytes);
    f("consumer_device", s.consumer_device);
    f("peer_to_peer", s.peer_to_peer);
    f("verify", s.verify);
    f("pressure_hold_seconds", s.pressure_hold_seconds);
  }
  /// "" when valid, else what is wrong.
  [[nodiscard]] std::string invalid() const;
  friend bool operator==(const kv_store_config&, const kv_store_config&) = default;
  friend void to_json(nlohmann::json& j, const kv_store_config& c) { j = specgen::detail::write_fields(c); }
};

/// What a store holds and has done since it was created.
struct kv_store_stats {
  std::uint64_t device_blocks = 0;            ///< blocks in GPU memory now
  std::uint64_t host_blocks = 0;              ///< blocks in the pinned host tier now
  std::vector<std::uint64_t> device_bytes{};  ///< slab bytes allocated per GPU of `devices`, in that order
  std::uint64_t host_bytes = 0;               ///< pinned slab bytes allocated
  std::uint64_t put_blocks = 0;               ///< blocks written by put, put_synthetic, put_from_device
  std::uint64_t fetches = 0;                  ///< fetch, fetch_to and get calls that succeeded
  std::uint64_t fetched_bytes = 0;
  std::uint64_t demoted = 0;      ///< blocks moved from a GPU to the host tier
  std::uint64_t compacted = 0;    ///< blocks moved between slabs of one GPU to free a slab
  std::uint64_t dropped = 0;      ///< blocks the store removed on its own (no room anywhere)
  std::uint64_t corrupt = 0;      ///< blocks whose checksum failed at a fetch
  std::uint64_t slabs_freed = 0;  ///< device slabs released (memory pressure, a lower capacity)
  std::uint64_t peer_copies = 0;  ///< GPU-to-GPU copies issued
  std::uint64_t host_copies = 0;  ///< copies through pinned host memory issued (no peer access)
  /// Wall time callers spent inside put, fetch, get and erase (lock waits
  /// included): how long the engine's thread was held by the store.
  double caller_seconds = 0;
  double caller_max_seconds = 0;   ///< the longest such call
  double make_room_seconds = 0;    ///< the same for make_room (the pool's device threads)
  friend bool operator==(const kv_store_stats&, const kv_store_stats&) = default;
};

/// One measured transfer.
struct kv_transfer {
  /// Host clock from the first enqueue to the completion of the last copy:
  /// what a fork waits. (CUDA events time one GPU; a transfer may span several.)
  duration time{0};
  std::uint64_t bytes = 0;
  int gathers = 0;  ///< gather kernels launched
  int copies = 0;   ///< copy-engine copies issued (one per chunk and contiguous run)
  friend bool operator==(const kv_transfer&, const kv_transfer&) = default;
};

/// Where one block is now (for tests and for code in the store's process).
struct kv_block_location {
  int device = -1;            ///< CUDA ordinal; -1: the pinned host tier
  std::uint64_t address = 0;  ///< device address (or host address, mapped into every GPU)
  std::uint64_t checksum = 0;  ///< 0 unless `verify`
  friend bool operator==(const kv_block_location&, const kv_block_location&) = default;
};

/**
 * Blocks of a prefix as another process maps them: one CUDA IPC handle per
 * slab and (slab, slot) per block. Plain data with JSON; carrying it between
 * the processes (a socket, a file) is the host application's part. Valid
 * until `kv_store::release(lease)` or the lease's deadline; the client checks
 * each block's tag (and checksum) before and after its copy, so a slot the
 * store reused meanwhile is detected, never served.
 */
struct kv_export {
  struct slab {
    std::string pci_bus_id{};  ///< of the GPU holding it ("0000:3b:00.0"): ordinals differ between processes
    std::string ipc_handle{};  ///< CUipcMemHandle, 64 bytes as 128 hex digits
    std::uint64_t bytes = 0;
    std::uint64_t tags_offset = 0;  ///< per slot: 16 bytes {key, checksum} from here
    friend bool operator==(const slab&, const slab&) = default;
  };
  struct block {
    std::uint64_t key = 0;
    std::uint32_t slab = 0;  ///< index into `slabs`
    std::uint32_t slot = 0;  ///< bytes at slot x block_bytes
    friend bool operator==(const block&, const block&) = default;
  };
  std::uint64_t lease = 0;
  std::uint64_t block_bytes = 0;
  bool checksums = false;  ///< the tags carry checksums (the store verifies)
  std::vector<slab> slabs{};
  std::vector<block> blocks{};  ///< the leading GPU-resident blocks of the chain asked for, in order
  friend bool operator==(const kv_export&, const kv_export&) = default;
};
void to_json(nlohmann::json& j, const kv_export& e);
/// Throws nlohmann::json::exception on a malformed descriptor: every key is
/// required, and the error names the JSON pointer of the value at fault
/// ("/slabs/1/bytes: missing (required)").
void from_json(const nlohmann::json& j, kv_export& e);

namespace detail {
struct kv_store_state;
struct kv_client_state;
}  // namespace detail

/**
 * Fixed-size KV blocks keyed by the core's hash chain (`block_keys`), in
 * slabs of GPU memory the evaluation leaves free (under a cap per GPU and
 * above a reserve), with a pinned host tier below; least recently used blocks
 * move down a tier, then out. Transfers are batched: a gather kernel into a
 * contiguous staging chunk, then one copy per chunk (peer-to-peer where the
 * GPUs allow it, through pinned host memory otherwise). Thread-safe: one lock
 * orders every call (transfers included). Not copyable: it owns device
 * memory, pinned memory and a context per GPU.
 *
 * @code
 *   auto s = specgen::gpu::kv_store::create({.block_bytes = 4 << 20, .devices = {1}, .verify = true});
 *   (*s)->put_synthetic(keys);                                   // on the GPU with most spare memory
 *   auto t = (*s)->fetch_to(keys, 0, my_device_buffer);          // one batched transfer into GPU 0
 *   if (t) fmt::print("{:.1f} GB/s\n", t->bytes / specgen::to_seconds(t->time) / 1e9);
 * @endcode
 */
class kv_store final : public kv_backing {
 public:
  /// Loads the driver, retains each GPU's primary context and compiles the
  /// gather kernels with NVRTC. "no GPU: ..." where there is none.
  static expected<std::shared_ptr<kv_store>, error> create(kv_store_config config = {});
  ~kv_store() override;
  kv_store(const kv_store&) = delete;
  kv_store& operator=(const kv_store&) = delete;

  // ---- kv_backing -----------------------------------------------------------------------
  [[nodiscard]] std::size_t block_bytes() const noexcept override;
  /// The caps of every GPU and of the host tier together (what an index in
  /// front may hold; the store itself holds less when memory is short).
  [[nodiscard]] std::uint64_t capacity_bytes() const noexcept override;
  /// Stores host bytes (`keys.size()` blocks, key order) on the GPU with most spare memory.
  expected<void, error> put(std::span<const std::uint64_t> keys, std::span<const std::byte> bytes) override;
  /// Copies the blocks into host memory; the measured time.
  expected<duration, error> get(std::span<const std::uint64_t> keys, std::span<std::byte> out) override;
  void erase(std::span<const std::uint64_t> keys) override;
  /// Lowers the caps so that they total at most `bytes` (the GPUs' first), releasing slabs above them.
  std::uint64_t shrink(std::uint64_t bytes) override;
  /// Writes `detail::synthetic_block` bytes with a kernel on the GPU with most spare memory.
  expected<void, error> put_synthetic(std::span<const std::uint64_t> keys) override;
  /// Into a receive buffer of the store's on `consumer_device` (a stand-in for
  /// the server's KV cache); `staging` is left empty. Records the chain for `chain()`.
  expected<duration, error> fetch(std::span<const std::uint64_t> keys, std::vector<std::byte>& staging) override;
  std::vector<std::uint64_t> take_dropped() override;

  // ---- beyond kv_backing ------------------------------------------------------------------
  /// Stores blocks from device memory (`keys.size()` blocks, key order, at
  /// `address` on GPU `device`, memory of its primary context): how a model
  /// server's KV enters the store.
  expected<void, error> put_from_device(std::span<const std::uint64_t> keys, int device, std::uint64_t address);
  /// Fetches the blocks in key order into `address` on GPU `device` (memory
  /// of its primary context, `keys.size() * block_bytes()` bytes, 16-byte aligned).
  expected<kv_transfer, error> fetch_to(std::span<const std::uint64_t> keys, int device, std::uint64_t address);

  /// Memory pressure: releases slabs on GPU `device` until at least `bytes`
  /// plus `reserve_bytes` are free there (moving live blocks into other slabs,
  /// down to the host tier, or out), and stops growing into that room for
  /// `pressure_hold_seconds`. Slabs another process has mapped are released
  /// only once their lease ends. Returns the bytes free on the GPU afterwards.
  /// A device the store does not use: returns its free bytes and does nothing else.
  std::uint64_t make_room(int device, std::uint64_t bytes);

  /// Exports the leading GPU-resident blocks of `keys` for another process,
  /// valid for `lease`. Blocks in the host tier end the export.
  expected<kv_export, error> export_blocks(std::span<const std::uint64_t> keys, duration lease = seconds(30));
  /// Ends a lease: its slabs may be released again.
  void release(std::uint64_t lease);

  /// The chain of a recent lease by its handle (`kv_lease::handle`, the last
  /// key): how a backend with KV hooks finds the blocks to map. Empty when
  /// unknown; the last 256 chains fetched are kept.
  [[nodiscard]] std::vector<std::uint64_t> chain(std::uint64_t handle) const;
  /// Number of leading `keys` the store holds (in either tier).
  [[nodiscard]] std::size_t resident(std::span<const std::uint64_t> keys) const;
  [[nodiscard]] std::optional<kv_block_location> locate(std::uint64_t key) const;
  /// The GPU a put would go to now: the one with most spare memory (-1: none has room).
  [[nodiscard]] int choose_device() const;
  [[nodiscard]] kv_store_stats stats() const;
  [[nodiscard]] const kv_store_config& config() const noexcept;
  /// Why the store stopped working (a sticky CUDA error), or "".
  [[nodiscard]] std::string broken() const;

 private:
  explicit kv_store(std::unique_ptr<detail::kv_store_state> s);
  std::unique_ptr<detail::kv_store_state> state_;
};

/**
 * A KV policy of real GPU memory: `backed_kv` over a `kv_store`, bytes
 * synthesised on the GPU (the replay model has no server KV), each lease a
 * measured transfer into `consumer_device`.
 *
 * @code
 *   auto kv = specgen::gpu::make_gpu_kv(specgen::kv_model{}, {.devices = {0}});
 *   if (kv) config.kv = std::move(*kv);
 * @endcode
 */
expected<policy::any_kv, error> make_gpu_kv(const kv_model& model, kv_store_config config = {});
/// Over a store shared with, say, the pool's `before_job` hook. Throws
/// std::invalid_argument when the store's blocks are not the model's.
policy::any_kv make_gpu_kv(std::shared_ptr<kv_store> store, const kv_model& model);

/// What a client's fetch found.
struct kv_client_fetch {
  std::size_t blocks = 0;  ///< leading blocks fetched and intact (the rest must be recomputed)
  std::size_t stale = 0;   ///< blocks whose slot the store reused meanwhile
  std::size_t corrupt = 0; ///< blocks whose checksum failed
  kv_transfer transfer{};
  friend bool operator==(const kv_client_fetch&, const kv_client_fetch&) = default;
};

/**
 * The other side of `kv_export`, in another process (an inference engine's):
 * opens the slabs' IPC handles on one GPU and gathers the blocks with the
 * store's own gather kernel. Not thread-safe; not copyable: it owns the
 * mappings, which must be closed (`unmap`, or destruction) before the lease
 * is released.
 *
 * @code
 *   auto c = specgen::gpu::kv_client::open(0);
 *   auto r = (*c)->fetch(nlohmann::json::parse(text).get<specgen::gpu::kv_export>(), kv_cache_address);
 *   (*c)->unmap();   // then tell the store to release r's lease
 * @endcode
 */
class kv_client {
 public:
  static expected<std::unique_ptr<kv_client>, error> open(int device);
  ~kv_client();
  kv_client(const kv_client&) = delete;
  kv_client& operator=(const kv_client&) = delete;

  /// Gathers the export's blocks in order into `address` (this client's GPU,
  /// primary context, `blocks.size() * block_bytes` bytes, 16-byte aligned).
  /// Blocks after the first stale or corrupt one are not counted as fetched.
  expected<kv_client_fetch, error> fetch(const kv_export& e, std::uint64_t address);
  /// The same into host memory (tests, tools): the bytes of the good leading blocks.
  expected<std::vector<std::byte>, error> fetch_to_host(const kv_export& e, kv_client_fetch* report = nullptr);
  /// Closes every mapped slab.
  void unmap();
  [[nodiscard]] int device() const noexcept;

 private:
  explicit kv_client(std::unique_ptr<detail::kv_client_state> s);
  std::unique_ptr<detail::kv_client_state> state_;
};

/// The checksum of one block as the store computes it on the GPU: the sum
/// (mod 2^64) over 8-byte little-endian words w_j of
/// `block_mix(w_j + (j + 1) * 0xd1b54a32d192ed03)`. Order-independent to
/// compute, position-dependent in value.
[[nodiscard]] std::uint64_t kv_block_checksum(std::span<const std::byte> block) noexcept;

}  // namespace gpu
SPECGEN_END_NAMESPACE
