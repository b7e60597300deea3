// The KV store's kernels and the per-GPU plumbing shared by the store and its clients.
#include "device.hpp"

#include "gpu/loader/nvrtc.hpp"

#include <specgen/gpu/kv_store.hpp>
#include <specgen/gpu/device_info.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::kv_detail {

// Every kernel walks a batch of blocks through pointer arrays (one launch for
// the whole batch: per-block launches or copies cost more than small blocks
// take to move) and 16-byte vectors. blockIdx.y strides over blocks,
// blockIdx.x and the threads over one block's vectors. The mixing function is
// the core's detail::block_mix, so `fill` writes detail::synthetic_block's
// bytes and `checksum` agrees with kv_block_checksum on the host.
const char* const kernel_source = R"(
typedef unsigned long long u64;

__device__ __forceinline__ u64 specgen_mix(u64 x) {
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27; x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

extern "C" __global__ void __launch_bounds__(256)
specgen_kv_copy(const uint4* const* __restrict__ src, uint4* const* __restrict__ dst, u64 vecs, unsigned n) {
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (unsigned b = blockIdx.y; b < n; b += gridDim.y) {
    const uint4* __restrict__ s = src[b];
    uint4* __restrict__ d = dst[b];
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    // Four loads in flight per thread before the stores: one at a time leaves
    // the copy bound by latency, not bandwidth.
    for (; i + 3 * stride < vecs; i += 4 * stride) {
      const uint4 a0 = s[i], a1 = s[i + stride], a2 = s[i + 2 * stride], a3 = s[i + 3 * stride];
      d[i] = a0; d[i + stride] = a1; d[i + 2 * stride] = a2; d[i + 3 * stride] = a3;
    }
    for (; i < vecs; i += stride) d[i] = s[i];
  }
}

extern "C" __global__ void __launch_bounds__(256)
specgen_kv_checksum(const uint4* const* __restrict__ src, u64 vecs, unsigned n, u64* __restrict__ sums) {
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (unsigned b = blockIdx.y; b < n; b += gridDim.y) {
    const uint4* __restrict__ s = src[b];
    u64 acc = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += stride) {
      const uint4 v = s[i];
      const u64 w0 = (u64)v.x | ((u64)v.y << 32), w1 = (u64)v.z | ((u64)v.w << 32);
      acc += specgen_mix(w0 + (2 * i + 1) * 0xd1b54a32d192ed03ull) + specgen_mix(w1 + (2 * i + 2) * 0xd1b54a32d192ed03ull);
    }
    // Every thread of the block reaches this (b depends on blockIdx only).
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0 && acc != 0) atomicAdd(&sums[b], acc);
  }
}

extern "C" __global__ void __launch_bounds__(256)
specgen_kv_fill(uint4* const* __restrict__ dst, const u64* __restrict__ keys, u64 vecs, unsigned n) {
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (unsigned b = blockIdx.y; b < n; b += gridDim.y) {
    const u64 k = keys[b];
    uint4* __restrict__ d = dst[b];
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += stride) {
      const u64 w0 = specgen_mix(k + (2 * i + 1) * 0x9e3779b97f4a7c15ull);
      const u64 w1 = specgen_mix(k + (2 * i + 2) * 0x9e3779b97f4a7c15ull);
      uint4 v;
      v.x = (unsigned)w0; v.y = (unsigned)(w0 >> 32); v.z = (unsigned)w1; v.w = (unsigned)(w1 >> 32);
      d[i] = v;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256)
specgen_kv_set(u64* const* __restrict__ where, const u64* __restrict__ values, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) *where[i] = values[i];
}
)";

expected<void, error> check(const driver_api& api, CUresult r, std::string_view what, bool* sticky) {
  if (r == CUDA_SUCCESS) return {};
  if (sticky && gpu::detail::is_sticky_error(r)) *sticky = true;
  return unexpected(error{fmt::format("{} failed: {}", what, gpu::detail::describe(api, r))});
}

expected<std::vector<char>, error> compile_kernels(const std::string& arch) {
  const auto& loaded = gpu::detail::load_nvrtc();
  if (!loaded) return unexpected(error{"the KV store's kernels cannot be compiled: " + loaded.error().message});
  const auto& nv = **loaded;
  nvrtcProgram prog = nullptr;
  if (nv.create_program(&prog, kernel_source, "specgen_kv.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return unexpected(error{"nvrtcCreateProgram failed for the KV store's kernels"});
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str(), "--std=c++17"};
  const nvrtcResult compiled = nv.compile_program(prog, 2, options);
  std::size_t log_size = 0;
  std::string log;
  if (nv.get_program_log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    if (nv.get_program_log(prog, log.data()) != NVRTC_SUCCESS) log.clear();
  }
  std::vector<char> cubin;
  std::size_t size = 0;
  const bool ok = compiled == NVRTC_SUCCESS && nv.get_cubin_size(prog, &size) == NVRTC_SUCCESS && size > 0 &&
                  (cubin.resize(size), nv.get_cubin(prog, cubin.data()) == NVRTC_SUCCESS);
  nv.destroy_program(&prog);
  if (!ok)
    return unexpected(error{fmt::format("NVRTC {} could not compile the KV store's kernels for {}: {}{}", nv.version_string,
                                        arch, nv.get_error_string(compiled), log.empty() ? "" : "\n" + log)});
  return cubin;
}

expected<std::shared_ptr<const std::vector<char>>, error> kernels_for(const std::string& arch) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const std::vector<char>>> cache;
  std::lock_guard lock(mutex);
  if (auto it = cache.find(arch); it != cache.end()) return it->second;
  auto built = compile_kernels(arch);
  if (!built) return unexpected(built.error());
  auto kept = std::make_shared<const std::vector<char>>(std::move(*built));
  cache.emplace(arch, kept);
  return kept;
}

expected<std::unique_ptr<kv_device>, error> kv_device::open(const driver_api& api, int ordinal) {
  std::unique_ptr<kv_device> d(new kv_device(api));
  d->ordinal = ordinal;
  const std::string on = fmt::format("GPU {}", ordinal);
  SPECGEN_KV_TRY(check(api, api.cuDeviceGet(&d->dev, ordinal), fmt::format("cuDeviceGet({})", ordinal)));
  SPECGEN_KV_TRY(check(api, api.cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain on " + on));
  SPECGEN_KV_TRY(d->use());
  int major = 0, minor = 0, uva = 0, map_host = 0;
  SPECGEN_KV_TRY(check(api, api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev), "compute capability"));
  SPECGEN_KV_TRY(check(api, api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev), "compute capability"));
  SPECGEN_KV_TRY(check(api, api.cuDeviceGetAttribute(&d->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev),
                       "multiprocessor count"));
  SPECGEN_KV_TRY(check(api, api.cuDeviceGetAttribute(&uva, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, d->dev), "unified addressing"));
  SPECGEN_KV_TRY(check(api, api.cuDeviceGetAttribute(&map_host, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, d->dev), "host mapping"));
  // Kernels read and write the pinned host tier through host addresses, and
  // pointers of every GPU are used across contexts: both need one address space.
  if (!uva || !map_host)
    return unexpected(error{fmt::format("{} lacks unified addressing or mapped host memory, which the KV store needs", on)});
  d->multiprocessors = std::max(1, d->multiprocessors);
  char bus[32] = {};
  SPECGEN_KV_TRY(check(api, api.cuDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus - 1), d->dev), "cuDeviceGetPCIBusId"));
  d->pci_bus_id = bus;
  d->arch = nvrtc_arch(major, minor);
  SPECGEN_KV_TRY(check(api, api.cuStreamCreate(&d->compute, CU_STREAM_NON_BLOCKING), "cuStreamCreate on " + on));
  SPECGEN_KV_TRY(check(api, api.cuStreamCreate(&d->copy, CU_STREAM_NON_BLOCKING), "cuStreamCreate on " + on));
  for (int i = 0; i < 2; ++i)
    for (CUevent* e : {&d->gathered[i], &d->released[i], &d->uploaded[i]})
      SPECGEN_KV_TRY(check(api, api.cuEventCreate(e, CU_EVENT_DISABLE_TIMING), "cuEventCreate on " + on));
  auto cubin = kernels_for(d->arch);
  if (!cubin) return unexpected(cubin.error());
  SPECGEN_KV_TRY(check(api, api.cuModuleLoadData(&d->module_, (*cubin)->data()), "loading the KV kernels on " + on));
  SPECGEN_KV_TRY(check(api, api.cuModuleGetFunction(&d->copy_, d->module_, "specgen_kv_copy"), "specgen_kv_copy"));
  SPECGEN_KV_TRY(check(api, api.cuModuleGetFunction(&d->checksum_, d->module_, "specgen_kv_checksum"), "specgen_kv_checksum"));
  SPECGEN_KV_TRY(check(api, api.cuModuleGetFunction(&d->fill_, d->module_, "specgen_kv_fill"), "specgen_kv_fill"));
  SPECGEN_KV_TRY(check(api, api.cuModuleGetFunction(&d->set_, d->module_, "specgen_kv_set"), "specgen_kv_set"));
  SPECGEN_KV_TRY(d->reserve_arena(std::size_t{1} << 20));
  return d;
}

kv_device::~kv_device() {
  if (!ctx) return;
  if (api.cuCtxSetCurrent(ctx) == CUDA_SUCCESS) {
    // Queued work may still read the arena or the module: let it finish first.
    if (compute) api.cuStreamSynchronize(compute);
    if (copy) api.cuStreamSynchronize(copy);
    if (arena_device_) api.cuMemFree(arena_device_);
    if (arena_host_) api.cuMemFreeHost(arena_host_);
    for (int i = 0; i < 2; ++i)
      for (CUevent e : {gathered[i], released[i], uploaded[i]})
        if (e) api.cuEventDestroy(e);
    if (compute) api.cuStreamDestroy(compute);
    if (copy) api.cuStreamDestroy(copy);
    if (module_) api.cuModuleUnload(module_);
  }
  api.cuDevicePrimaryCtxRelease(dev);
}

expected<void, error> kv_device::use() const {
  return check(api, api.cuCtxSetCurrent(ctx), fmt::format("cuCtxSetCurrent(GPU {})", ordinal));
}

expected<void, error> kv_device::reserve_arena(std::size_t bytes) {
  arena_used_ = 0;
  if (bytes <= arena_bytes_) return {};
  SPECGEN_KV_TRY(use());
  const std::size_t want = std::max({bytes, 2 * arena_bytes_, std::size_t{1} << 20});
  if (arena_device_) api.cuMemFree(arena_device_);
  if (arena_host_) api.cuMemFreeHost(arena_host_);
  arena_device_ = 0;
  arena_host_ = nullptr;
  arena_bytes_ = 0;
  SPECGEN_KV_TRY(check(api, api.cuMemAlloc(&arena_device_, want), fmt::format("cuMemAlloc of {} argument bytes", want)));
  void* host = nullptr;
  // Pinned, so the argument uploads are truly asynchronous and the downloads land here.
  SPECGEN_KV_TRY(check(api, api.cuMemHostAlloc(&host, want, CU_MEMHOSTALLOC_PORTABLE), fmt::format("cuMemHostAlloc of {} bytes", want)));
  arena_host_ = static_cast<std::byte*>(host);
  arena_bytes_ = want;
  return {};
}

expected<CUdeviceptr, error> kv_device::upload(CUstream s, const void* data, std::size_t bytes) {
  const std::size_t at = (arena_used_ + 15) & ~std::size_t{15};
  if (at + bytes > arena_bytes_)
    return unexpected(error{fmt::format("KV argument arena of GPU {} overflows ({} + {} > {} bytes): a bug in the store's sizing",
                                        ordinal, at, bytes, arena_bytes_)});
  std::memcpy(arena_host_ + at, data, bytes);
  arena_used_ = at + bytes;
  SPECGEN_KV_TRY(check(api, api.cuMemcpyHtoDAsync(arena_device_ + at, arena_host_ + at, bytes, s), "uploading kernel arguments"));
  return arena_device_ + at;
}

expected<kv_device::words, error> kv_device::zeroed_words(CUstream s, std::size_t count) {
  const std::size_t at = (arena_used_ + 15) & ~std::size_t{15};
  const std::size_t bytes = count * sizeof(std::uint64_t);
  if (at + bytes > arena_bytes_)
    return unexpected(error{fmt::format("KV argument arena of GPU {} overflows: a bug in the store's sizing", ordinal)});
  arena_used_ = at + bytes;
  std::memset(arena_host_ + at, 0, bytes);
  if (bytes > 0) SPECGEN_KV_TRY(check(api, api.cuMemsetD8Async(arena_device_ + at, 0, bytes, s), "cuMemsetD8Async"));
  return words{arena_device_ + at, reinterpret_cast<const std::uint64_t*>(arena_host_ + at), count};
}

expected<void, error> kv_device::download(CUstream s, const words& w) {
  if (w.count == 0) return {};
  const std::size_t at = static_cast<std::size_t>(w.device - arena_device_);
  return check(api, api.cuMemcpyDtoHAsync(arena_host_ + at, w.device, w.count * sizeof(std::uint64_t), s), "downloading checksums");
}

expected<void, error> kv_device::launch(CUstream s, CUfunction f, std::uint64_t vecs, std::size_t n, void** params) {
  if (n == 0) return {};
  // blockIdx.y walks the blocks, blockIdx.x splits each; about 8 blocks of
  // threads per multiprocessor in all keeps every SM busy without a long tail.
  const std::uint64_t y = std::min<std::uint64_t>(n, 65535);
  const std::uint64_t target = 8ull * static_cast<std::uint64_t>(multiprocessors);
  const std::uint64_t per_block = std::max<std::uint64_t>(1, (vecs + 4 * block_threads - 1) / (4 * block_threads));
  const std::uint64_t x = std::clamp<std::uint64_t>(std::max<std::uint64_t>(1, target / y), 1, per_block);
  return check(api,
               api.cuLaunchKernel(f, static_cast<unsigned>(x), static_cast<unsigned>(y), 1, block_threads, 1, 1, 0, s, params,
                                  nullptr),
               fmt::format("launching a KV kernel on GPU {} ({} blocks)", ordinal, n));
}

expected<void, error> kv_device::copy_blocks(CUstream s, std::span<const std::uint64_t> src, std::span<const std::uint64_t> dst,
                                             std::uint64_t bytes) {
  if (src.size() != dst.size()) return unexpected(error{"copy_blocks: as many sources as destinations"});
  if (src.empty()) return {};
  std::vector<std::uint64_t> both(src.begin(), src.end());
  both.insert(both.end(), dst.begin(), dst.end());
  auto args = upload(s, both.data(), both.size() * sizeof(std::uint64_t));
  if (!args) return unexpected(args.error());
  CUdeviceptr psrc = *args, pdst = *args + src.size() * sizeof(std::uint64_t);
  unsigned long long vecs = bytes / 16;
  unsigned n = static_cast<unsigned>(src.size());
  void* params[] = {&psrc, &pdst, &vecs, &n};
  return launch(s, copy_, vecs, src.size(), params);
}

expected<void, error> kv_device::checksum_blocks(CUstream s, std::span<const std::uint64_t> src, std::uint64_t bytes, CUdeviceptr sums) {
  if (src.empty()) return {};
  auto args = upload(s, src.data(), src.size_bytes());
  if (!args) return unexpected(args.error());
  CUdeviceptr psrc = *args, psums = sums;
  unsigned long long vecs = bytes / 16;
  unsigned n = static_cast<unsigned>(src.size());
  void* params[] = {&psrc, &vecs, &n, &psums};
  return launch(s, checksum_, vecs, src.size(), params);
}

expected<void, error> kv_device::fill_blocks(CUstream s, std::span<const std::uint64_t> dst, std::span<const std::uint64_t> keys,
                                             std::uint64_t bytes) {
  if (dst.size() != keys.size()) return unexpected(error{"fill_blocks: one key per block"});
  if (dst.empty()) return {};
  std::vector<std::uint64_t> both(dst.begin(), dst.end());
  both.insert(both.end(), keys.begin(), keys.end());
  auto args = upload(s, both.data(), both.size() * sizeof(std::uint64_t));
  if (!args) return unexpected(args.error());
  CUdeviceptr pdst = *args, pkeys = *args + dst.size() * sizeof(std::uint64_t);
  unsigned long long vecs = bytes / 16;
  unsigned n = static_cast<unsigned>(dst.size());
  void* params[] = {&pdst, &pkeys, &vecs, &n};
  return launch(s, fill_, vecs, dst.size(), params);
}

expected<void, error> kv_device::set_words(CUstream s, std::span<const std::uint64_t> where, CUdeviceptr values) {
  if (where.empty()) return {};
  auto args = upload(s, where.data(), where.size_bytes());
  if (!args) return unexpected(args.error());
  CUdeviceptr pwhere = *args, pvalues = values;
  unsigned n = static_cast<unsigned>(where.size());
  void* params[] = {&pwhere, &pvalues, &n};
  // One word per thread: vecs = 1 per "block" of the geometry, n of them along x instead.
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((where.size() + block_threads - 1) / block_threads, 1024));
  return check(api, api.cuLaunchKernel(set_, blocks, 1, 1, block_threads, 1, 1, 0, s, params, nullptr),
               fmt::format("launching specgen_kv_set on GPU {}", ordinal));
}

expected<void, error> kv_device::synchronize() const {
  SPECGEN_KV_TRY(use());
  SPECGEN_KV_TRY(check(api, api.cuStreamSynchronize(compute), fmt::format("synchronising GPU {}", ordinal)));
  return check(api, api.cuStreamSynchronize(copy), fmt::format("synchronising GPU {}", ordinal));
}

expected<std::uint64_t, error> kv_device::free_memory() const {
  SPECGEN_KV_TRY(use());
  std::size_t free = 0, total = 0;
  SPECGEN_KV_TRY(check(api, api.cuMemGetInfo(&free, &total), fmt::format("cuMemGetInfo on GPU {}", ordinal)));
  return static_cast<std::uint64_t>(free);
}

std::string to_hex(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (auto b : bytes) out += fmt::format("{:02x}", std::to_integer<unsigned>(b));
  return out;
}

bool from_hex(std::string_view hex, std::span<std::byte> out) {
  if (hex.size() != out.size() * 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::byte>(hi * 16 + lo);
  }
  return true;
}

}  // namespace gpu::kv_detail

namespace gpu {

std::uint64_t kv_block_checksum(std::span<const std::byte> block) noexcept {
  std::uint64_t sum = 0;
  for (std::size_t j = 0; j * 8 < block.size(); ++j) {
    std::uint64_t w = 0;
    for (std::size_t b = 0; b < 8 && j * 8 + b < block.size(); ++b)
      w |= std::to_integer<std::uint64_t>(block[j * 8 + b]) << (8 * b);
    sum += specgen::detail::block_mix(w + (j + 1) * 0xd1b54a32d192ed03ull);
  }
  return sum;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
