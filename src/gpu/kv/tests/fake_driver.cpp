// specgen-kv-fake-driver: a stand-in libcuda.so for gpu_kv_test on machines
// without a GPU (loaded through SPECGEN_CUDA_LIBRARY; ctest's
// gpu_kv_fake_driver_test). It tests the store's host side, not the GPU:
//  - stream work is deferred and runs at synchronisation points in a random
//    order that respects only what CUDA guarantees (issue order within a
//    stream, cuStreamWaitEvent on the latest record), so a missing wait
//    corrupts bytes the tests compare; pinned sources are read when the copy
//    runs, pageable ones when it is issued, as on a GPU;
//  - the store's four kernels are emulated by name, with every address checked:
//    inside an allocation, of the launching GPU (or a peer with access enabled,
//    or pinned host memory mapped into the device), 16-byte aligned, no two
//    blocks of one launch writing the same bytes;
//  - contexts are checked where CUDA requires it (the stream's context current
//    for async calls and launches, events recorded in their own context,
//    cuMemFree with the owning GPU current);
//  - device memory is memfd-backed, so CUDA IPC works across processes; memory
//    accounting is shared between processes through /dev/shm.
// Environment: FAKECUDA_GPUS (default 2), FAKECUDA_MEM bytes per GPU (default
// 2 GiB), FAKECUDA_PEER (default 1: GPUs may access each other), FAKECUDA_SEED
// (default 1: the interleaving), FAKECUDA_ASYNC=0 (run every call at once).
// Violations print "FAKECUDA VIOLATION: ..." and fail the call.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

struct shared_mem { std::atomic<std::uint64_t> used[8]; };

int gpus() { const char* e = getenv("FAKECUDA_GPUS"); return e ? atoi(e) : 2; }
std::uint64_t total_mem() { const char* e = getenv("FAKECUDA_MEM"); return e ? strtoull(e, nullptr, 10) : (2ull << 30); }
bool peer_capable() { const char* e = getenv("FAKECUDA_PEER"); return !e || atoi(e) != 0; }

std::string& shm_created() {
  static std::string name;
  return name;
}
void unlink_shm() { shm_unlink(shm_created().c_str()); }

/// The accounting shared by this process and its children: named by
/// $FAKECUDA_SHM, or created here (and exported for children, unlinked at exit).
shared_mem* shm() {
  static shared_mem* s = [] {
    std::string name;
    if (const char* e = getenv("FAKECUDA_SHM"); e && *e) {
      name = e;
    } else {
      name = "/specgen-fakecuda-" + std::to_string(getpid());
      setenv("FAKECUDA_SHM", name.c_str(), 1);
      shm_created() = name;
      atexit(unlink_shm);
    }
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0) { perror("shm_open"); abort(); }
    if (ftruncate(fd, sizeof(shared_mem)) != 0) abort();
    void* p = mmap(nullptr, sizeof(shared_mem), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return static_cast<shared_mem*>(p);
  }();
  return s;
}

struct ctx_t { int device; std::map<int, bool> peers; int refs = 0; };
struct event_t {
  struct ctx_t* ctx;
  std::uint64_t recorded = 0;   // records issued
  std::uint64_t completed = 0;  // records reached by their stream
};
/// One queued piece of stream work: a wait, a record, or an operation.
struct op_t {
  event_t* wait = nullptr;
  std::uint64_t wait_for = 0;
  event_t* record = nullptr;
  std::uint64_t record_as = 0;
  std::function<CUresult()> run;
  std::shared_ptr<bool> done;  // set when it ran (for calls that return only then)
};
struct stream_t {
  ctx_t* ctx;
  std::deque<op_t> q;
  CUresult error = CUDA_SUCCESS;
};
struct module_t { ctx_t* ctx; };
struct func_t { ctx_t* ctx; int kind; };

enum kind_t { k_device, k_host, k_ipc };
struct alloc_t { std::uint64_t base, size; int device; kind_t kind; unsigned flags; int fd; };

std::recursive_mutex mu;
using guard = std::lock_guard<std::recursive_mutex>;
ctx_t contexts[8];
std::vector<stream_t*> streams;
bool deferred() { const char* e = getenv("FAKECUDA_ASYNC"); return !e || atoi(e) != 0; }
std::mt19937_64& rng() {
  static std::mt19937_64 r(getenv("FAKECUDA_SEED") ? strtoull(getenv("FAKECUDA_SEED"), nullptr, 10) : 1);
  return r;
}
std::map<std::uint64_t, alloc_t> allocs;  // by base
thread_local ctx_t* current = nullptr;
int launches = 0;

void fail(const char* what) { fprintf(stderr, "FAKECUDA VIOLATION: %s\n", what); }

const alloc_t* find(std::uint64_t p) {
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (p >= it->second.base && p < it->second.base + it->second.size) return &it->second;
  return nullptr;
}

bool in_range(std::uint64_t p, std::uint64_t n) {
  auto a = find(p);
  return a && p + n <= a->base + a->size;
}

/// Whether a kernel on device d may touch [p, p+n).
bool kernel_access(int d, std::uint64_t p, std::uint64_t n, const char* what) {
  auto a = find(p);
  if (!a || p + n > a->base + a->size) { fprintf(stderr, "FAKECUDA VIOLATION: %s: %llx+%llu outside any allocation\n", what, (unsigned long long)p, (unsigned long long)n); return false; }
  if (a->kind == k_host) {
    if (!(a->flags & CU_MEMHOSTALLOC_DEVICEMAP)) { fprintf(stderr, "FAKECUDA VIOLATION: %s: host memory not DEVICEMAP\n", what); return false; }
    return true;
  }
  if (a->device == d) return true;
  if (contexts[d].peers.count(a->device) && contexts[d].peers[a->device]) return true;
  fprintf(stderr, "FAKECUDA VIOLATION: %s: device %d reads device %d memory without peer access\n", what, d, a->device);
  return false;
}

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 27; x *= 0x94d049bb133111ebull; x ^= x >> 31; return x;
}

CUresult need_ctx() { return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

bool runnable(const stream_t* s) {
  if (s->q.empty()) return false;
  const op_t& o = s->q.front();
  return !o.wait || o.wait->completed >= o.wait_for;
}

void execute(stream_t* s) {
  op_t o = std::move(s->q.front());
  s->q.pop_front();
  if (o.record) o.record->completed = std::max(o.record->completed, o.record_as);
  if (o.run) {
    const CUresult r = o.run();
    if (r != CUDA_SUCCESS && s->error == CUDA_SUCCESS) s->error = r;
  }
  if (o.done) *o.done = true;
}

/// Runs queued work, any runnable stream's next piece at random, until `enough`.
void drain(const std::function<bool()>& enough) {
  guard l(mu);
  while (!enough()) {
    std::vector<stream_t*> ready;
    bool queued = false;
    for (auto* s : streams) {
      queued = queued || !s->q.empty();
      if (runnable(s)) ready.push_back(s);
    }
    if (ready.empty()) {
      if (queued) {
        fail("deadlock: every queued stream waits on an event that is never reached");
        for (auto* s : streams) s->q.clear();
      }
      return;
    }
    execute(ready[rng()() % ready.size()]);
  }
}
void drain_all() {
  drain([] {
    for (auto* s : streams)
      if (!s->q.empty()) return false;
    return true;
  });
}

void enqueue(stream_t* s, op_t o) {
  guard l(mu);
  s->q.push_back(std::move(o));
  if (!deferred()) drain_all();
}
void enqueue(stream_t* s, std::function<CUresult()> run) { enqueue(s, op_t{nullptr, 0, nullptr, 0, std::move(run), nullptr}); }

bool pinned(const void* p) {
  guard l(mu);
  auto a = find(reinterpret_cast<std::uint64_t>(p));
  return a && a->kind == k_host;
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult r, const char** s) { static thread_local std::string t; t = "CUDA_ERROR_" + std::to_string((int)r); *s = t.c_str(); return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult r, const char** s) { static thread_local std::string t; t = "fake error " + std::to_string((int)r); *s = t.c_str(); return CUDA_SUCCESS; }
CUresult cuInit(unsigned) { for (int i = 0; i < 8; ++i) contexts[i].device = i; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int* n) { *n = gpus(); return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int o) { if (o < 0 || o >= gpus()) return CUDA_ERROR_INVALID_DEVICE; *d = o; return CUDA_SUCCESS; }
CUresult cuDeviceGetName(char* n, int len, CUdevice d) { snprintf(n, len, "fake H200 %d", d); return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    default: *v = 1;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice) { *b = total_mem(); return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { guard l(mu); contexts[d].device = d; ++contexts[d].refs; *c = reinterpret_cast<CUcontext>(&contexts[d]); return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { guard l(mu); if (--contexts[d].refs < 0) fail("primary ctx released too often"); return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) { current = reinterpret_cast<ctx_t*>(c); return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext* c) { *c = reinterpret_cast<CUcontext>(current); return CUDA_SUCCESS; }
CUresult cuStreamCreate(CUstream* s, unsigned) {
  if (need_ctx()) return need_ctx();
  guard l(mu);
  auto* st = new stream_t{current, {}, CUDA_SUCCESS};
  streams.push_back(st);
  *s = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  guard l(mu);
  auto* st = reinterpret_cast<stream_t*>(s);
  drain([&] { return st->q.empty(); });
  std::erase(streams, st);
  delete st;
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent* e, unsigned) { if (need_ctx()) return need_ctx(); *e = reinterpret_cast<CUevent>(new event_t{current}); return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent e) { delete reinterpret_cast<event_t*>(e); return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) {
  auto* ev = reinterpret_cast<event_t*>(e);
  auto* st = reinterpret_cast<stream_t*>(s);
  if (!st || ev->ctx != st->ctx) { fail("event recorded on a stream of another context"); return CUDA_ERROR_INVALID_HANDLE; }
  guard l(mu);
  enqueue(st, op_t{nullptr, 0, ev, ++ev->recorded, {}, nullptr});
  return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent e) {
  guard l(mu);
  auto* ev = reinterpret_cast<event_t*>(e);
  return ev->completed >= ev->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned) {
  auto* st = reinterpret_cast<stream_t*>(s);
  if (!st) { fail("cuStreamWaitEvent on the null stream"); return CUDA_ERROR_INVALID_HANDLE; }
  guard l(mu);
  auto* ev = reinterpret_cast<event_t*>(e);
  enqueue(st, op_t{ev, ev->recorded, nullptr, 0, {}, nullptr});  // the latest record at the time of the call
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream s) {
  auto* st = reinterpret_cast<stream_t*>(s);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  guard l(mu);
  drain([&] { return st->q.empty(); });
  return std::exchange(st->error, CUDA_SUCCESS);
}
CUresult cuCtxSynchronize() {
  if (need_ctx()) return need_ctx();
  guard l(mu);
  ctx_t* c = current;
  drain([&] {
    for (auto* s : streams)
      if (s->ctx == c && !s->q.empty()) return false;
    return true;
  });
  return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (need_ctx()) return need_ctx();
  const auto used = shm()->used[current->device].load();
  *total = total_mem();
  *free = used >= total_mem() ? 0 : total_mem() - used;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  if (need_ctx()) return need_ctx();
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  const int d = current->device;
  const std::uint64_t rounded = (n + 2097151) & ~std::uint64_t{2097151};  // 2 MiB granularity, like the real thing
  if (shm()->used[d].fetch_add(rounded) + rounded > total_mem()) { shm()->used[d].fetch_sub(rounded); return CUDA_ERROR_OUT_OF_MEMORY; }
  int fd = memfd_create("fakecuda", 0);
  if (fd < 0 || ftruncate(fd, n) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  // Real device memory is not zero: fill with junk.
  memset(m, 0xcd, std::min<size_t>(n, 1 << 20));
  guard l(mu);
  allocs[(std::uint64_t)m] = {(std::uint64_t)m, n, d, k_device, 0, fd};
  *p = (CUdeviceptr)m;
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  guard l(mu);
  drain_all();  // freeing waits for queued work, as cudaFree does
  auto it = allocs.find(p);
  if (it == allocs.end() || it->second.kind != k_device) { fail("cuMemFree of a pointer that is not a device allocation base"); return CUDA_ERROR_INVALID_VALUE; }
  if (!current || current->device != it->second.device) fail("cuMemFree with another device's context current");
  const std::uint64_t rounded = (it->second.size + 2097151) & ~std::uint64_t{2097151};
  shm()->used[it->second.device].fetch_sub(rounded);
  munmap((void*)p, it->second.size);
  close(it->second.fd);
  allocs.erase(it);
  return CUDA_SUCCESS;
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) {
  void* m = aligned_alloc(4096, (n + 4095) & ~size_t{4095});
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  guard l(mu);
  allocs[(std::uint64_t)m] = {(std::uint64_t)m, n, -1, k_host, flags, -1};
  *p = m;
  return CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void* p) {
  guard l(mu);
  drain_all();
  auto it = allocs.find((std::uint64_t)p);
  if (it == allocs.end() || it->second.kind != k_host) { fail("cuMemFreeHost of an unknown pointer"); return CUDA_ERROR_INVALID_VALUE; }
  allocs.erase(it);
  free(p);
  return CUDA_SUCCESS;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned) {
  guard l(mu);
  auto a = find((std::uint64_t)p);
  if (!a || a->kind != k_host || !(a->flags & CU_MEMHOSTALLOC_DEVICEMAP)) return CUDA_ERROR_INVALID_VALUE;
  *d = (CUdeviceptr)p;
  return CUDA_SUCCESS;
}

static CUresult copy_checked(std::uint64_t dst, std::uint64_t src, size_t n, const char* what) {
  guard l(mu);
  if (!in_range(dst, n) && find(dst)) { fprintf(stderr, "FAKECUDA VIOLATION: %s: destination overflows its allocation\n", what); return CUDA_ERROR_INVALID_VALUE; }
  if (!in_range(src, n) && find(src)) { fprintf(stderr, "FAKECUDA VIOLATION: %s: source overflows its allocation\n", what); return CUDA_ERROR_INVALID_VALUE; }
  memmove((void*)dst, (const void*)src, n);
  return CUDA_SUCCESS;
}
static bool stream_ok(CUstream s, const char* what) {
  auto* st = reinterpret_cast<stream_t*>(s);
  if (!st) { fprintf(stderr, "FAKECUDA VIOLATION: %s on the null stream\n", what); return false; }
  if (st->ctx != current) { fprintf(stderr, "FAKECUDA VIOLATION: %s: stream of device %d with device %d current\n", what, st->ctx->device, current ? current->device : -1); return false; }
  return true;
}
static bool device_ptr(std::uint64_t p, size_t n, const char* what) {
  guard l(mu);
  auto a = find(p);
  if (!a || a->kind == k_host || p + n > a->base + a->size) { fprintf(stderr, "FAKECUDA VIOLATION: %s: not device memory\n", what); return false; }
  return true;
}
static bool host_ptr_ok(const void* p) {
  guard l(mu);
  auto a = find((std::uint64_t)p);
  return !a || a->kind == k_host;  // pageable (unknown) or pinned
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* h, size_t n) { if (!device_ptr(d, n, "cuMemcpyHtoD")) return CUDA_ERROR_INVALID_VALUE; return copy_checked(d, (std::uint64_t)h, n, "HtoD"); }
CUresult cuMemcpyDtoH_v2(void* h, CUdeviceptr d, size_t n) { if (!device_ptr(d, n, "cuMemcpyDtoH")) return CUDA_ERROR_INVALID_VALUE; return copy_checked((std::uint64_t)h, d, n, "DtoH"); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* h, size_t n, CUstream s) {
  if (!stream_ok(s, "cuMemcpyHtoDAsync") || !device_ptr(d, n, "cuMemcpyHtoDAsync") || !host_ptr_ok(h)) return CUDA_ERROR_INVALID_VALUE;
  auto* st = reinterpret_cast<stream_t*>(s);
  if (pinned(h)) {  // read when the copy runs: the caller must not reuse it before
    enqueue(st, [=] { return copy_checked(d, (std::uint64_t)h, n, "HtoDAsync"); });
  } else {  // pageable: staged at the call
    auto staged = std::make_shared<std::vector<char>>((const char*)h, (const char*)h + n);
    enqueue(st, [=] { return copy_checked(d, (std::uint64_t)staged->data(), n, "HtoDAsync"); });
  }
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoHAsync_v2(void* h, CUdeviceptr d, size_t n, CUstream s) {
  if (!stream_ok(s, "cuMemcpyDtoHAsync") || !device_ptr(d, n, "cuMemcpyDtoHAsync") || !host_ptr_ok(h)) return CUDA_ERROR_INVALID_VALUE;
  auto* st = reinterpret_cast<stream_t*>(s);
  auto done = std::make_shared<bool>(false);
  guard l(mu);
  enqueue(st, op_t{nullptr, 0, nullptr, 0, [=] { return copy_checked((std::uint64_t)h, d, n, "DtoHAsync"); }, done});
  if (!pinned(h)) drain([&] { return *done; });  // into pageable memory the call returns once the copy is done
  return CUDA_SUCCESS;
}
std::atomic<int> peer_copies{0}, staged_peer_copies{0};
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s) {
  auto* dc = reinterpret_cast<ctx_t*>(dctx);
  auto* sc = reinterpret_cast<ctx_t*>(sctx);
  auto* st = reinterpret_cast<stream_t*>(s);
  if (st->ctx != sc && st->ctx != dc) { fail("cuMemcpyPeerAsync on a stream of neither context"); return CUDA_ERROR_INVALID_HANDLE; }
  if (st->ctx != current) fail("cuMemcpyPeerAsync: stream's context not current");
  {
    guard l(mu);
    auto a = find(dst), b = find(src);
    if (!a || a->device != dc->device || !b || b->device != sc->device) { fail("cuMemcpyPeerAsync: pointers not in the named contexts"); return CUDA_ERROR_INVALID_VALUE; }
    if (sc->peers.count(dc->device)) ++peer_copies; else ++staged_peer_copies;
  }
  enqueue(st, [=] { return copy_checked(dst, src, n, "PeerAsync"); });
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { if (!device_ptr(p, n, "cuMemsetD8")) return CUDA_ERROR_INVALID_VALUE; memset((void*)p, v, n); return CUDA_SUCCESS; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  if (!stream_ok(s, "cuMemsetD8Async") || !device_ptr(p, n, "cuMemsetD8Async")) return CUDA_ERROR_INVALID_VALUE;
  guard l(mu);
  if (find(p)->device != current->device) { fail("cuMemsetD8Async on another device's memory"); return CUDA_ERROR_INVALID_VALUE; }
  enqueue(reinterpret_cast<stream_t*>(s), [=] {
    memset((void*)p, v, n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}
CUresult cuModuleLoadData(CUmodule* m, const void*) { if (need_ctx()) return need_ctx(); *m = reinterpret_cast<CUmodule>(new module_t{current}); return CUDA_SUCCESS; }
CUresult cuModuleUnload(CUmodule m) { delete reinterpret_cast<module_t*>(m); return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  int k = -1;
  if (!strcmp(name, "specgen_kv_copy")) k = 0;
  if (!strcmp(name, "specgen_kv_checksum")) k = 1;
  if (!strcmp(name, "specgen_kv_fill")) k = 2;
  if (!strcmp(name, "specgen_kv_set")) k = 3;
  if (k < 0) return CUDA_ERROR_NOT_FOUND;
  *f = reinterpret_cast<CUfunction>(new func_t{reinterpret_cast<module_t*>(m)->ctx, k});
  return CUDA_SUCCESS;
}

/// The store's kernels on the host, with every address checked when they run.
static CUresult emulate(int kind, int d, std::uint64_t a0, std::uint64_t a1, std::uint64_t a2, std::uint64_t a3) {
  guard l(mu);
  ++launches;
  auto arr = [&](std::uint64_t p, unsigned n, const char* what) -> const std::uint64_t* {
    if (!kernel_access(d, p, std::uint64_t(n) * 8, what)) return nullptr;
    if (find(p)->kind != k_device) { fail("argument array not in device memory"); return nullptr; }
    return reinterpret_cast<const std::uint64_t*>(p);
  };
  switch (kind) {
    case 0: {  // copy(src[], dst[], vecs, n)
      const std::uint64_t src = a0, dst = a1, vecs = a2;
      const unsigned n = static_cast<unsigned>(a3);
      auto S = arr(src, n, "copy src array"), D = arr(dst, n, "copy dst array");
      if (!S || !D) return CUDA_ERROR_ILLEGAL_ADDRESS;
      for (unsigned b = 0; b < n; ++b) {
        if (S[b] % 16 || D[b] % 16) { fail("copy: misaligned"); return CUDA_ERROR_MISALIGNED_ADDRESS; }
        if (!kernel_access(d, S[b], vecs * 16, "copy src") || !kernel_access(d, D[b], vecs * 16, "copy dst")) return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (S[b] < D[b] + vecs * 16 && D[b] < S[b] + vecs * 16) { fail("copy: overlapping source and destination"); return CUDA_ERROR_ILLEGAL_ADDRESS; }
      }
      // Two destinations written by one launch race on a GPU.
      std::vector<std::uint64_t> ds(D, D + n);
      std::sort(ds.begin(), ds.end());
      for (unsigned b = 1; b < n; ++b) if (ds[b] < ds[b - 1] + vecs * 16) { fail("copy: two blocks of one launch write the same bytes"); return CUDA_ERROR_ILLEGAL_ADDRESS; }
      for (unsigned b = 0; b < n; ++b) memcpy((void*)D[b], (const void*)S[b], vecs * 16);
      return CUDA_SUCCESS;
    }
    case 1: {  // checksum(src[], vecs, n, sums)
      const std::uint64_t src = a0, vecs = a1, sums = a3;
      const unsigned n = static_cast<unsigned>(a2);
      auto S = arr(src, n, "checksum src array");
      if (!S || !kernel_access(d, sums, std::uint64_t(n) * 8, "checksum sums")) return CUDA_ERROR_ILLEGAL_ADDRESS;
      for (unsigned b = 0; b < n; ++b) {
        if (!kernel_access(d, S[b], vecs * 16, "checksum src")) return CUDA_ERROR_ILLEGAL_ADDRESS;
        std::uint64_t acc = 0;
        const auto* w = reinterpret_cast<const std::uint64_t*>(S[b]);
        for (std::uint64_t j = 0; j < 2 * vecs; ++j) acc += mix(w[j] + (j + 1) * 0xd1b54a32d192ed03ull);
        reinterpret_cast<std::uint64_t*>(sums)[b] += acc;
      }
      return CUDA_SUCCESS;
    }
    case 2: {  // fill(dst[], keys[], vecs, n)
      const std::uint64_t dst = a0, keys = a1, vecs = a2;
      const unsigned n = static_cast<unsigned>(a3);
      auto D = arr(dst, n, "fill dst array"), K = arr(keys, n, "fill keys");
      if (!D || !K) return CUDA_ERROR_ILLEGAL_ADDRESS;
      for (unsigned b = 0; b < n; ++b) {
        if (!kernel_access(d, D[b], vecs * 16, "fill dst")) return CUDA_ERROR_ILLEGAL_ADDRESS;
        auto* w = reinterpret_cast<std::uint64_t*>(D[b]);
        for (std::uint64_t j = 0; j < 2 * vecs; ++j) w[j] = mix(K[b] + (j + 1) * 0x9e3779b97f4a7c15ull);
      }
      return CUDA_SUCCESS;
    }
    case 3: {  // set(where[], values[], n)
      const std::uint64_t where = a0, values = a1;
      const unsigned n = static_cast<unsigned>(a2);
      auto W = arr(where, n, "set where"), V = arr(values, n, "set values");
      if (!W || !V) return CUDA_ERROR_ILLEGAL_ADDRESS;
      for (unsigned i = 0; i < n; ++i) {
        if (W[i] % 8 || !kernel_access(d, W[i], 8, "set target")) return CUDA_ERROR_ILLEGAL_ADDRESS;
        *reinterpret_cast<std::uint64_t*>(W[i]) = V[i];
      }
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,
                        CUstream s, void** params, void** extra) {
  auto* fn = reinterpret_cast<func_t*>(f);
  if (!stream_ok(s, "cuLaunchKernel")) return CUDA_ERROR_INVALID_HANDLE;
  if (fn->ctx != current) { fail("kernel of another context launched"); return CUDA_ERROR_INVALID_HANDLE; }
  if (gx == 0 || gy == 0 || gy > 65535 || gz != 1 || bx != 256 || by != 1 || bz != 1 || smem != 0 || extra) { fail("bad launch geometry"); return CUDA_ERROR_INVALID_VALUE; }
  // The parameters are copied at the launch, as CUDA does; the memory they point to is read when it runs.
  std::uint64_t a[4] = {};
  switch (fn->kind) {
    case 0: case 2:  // (ptr, ptr, u64, unsigned)
      a[0] = *(CUdeviceptr*)params[0]; a[1] = *(CUdeviceptr*)params[1]; a[2] = *(unsigned long long*)params[2]; a[3] = *(unsigned*)params[3];
      break;
    case 1:  // (ptr, u64, unsigned, ptr)
      a[0] = *(CUdeviceptr*)params[0]; a[1] = *(unsigned long long*)params[1]; a[2] = *(unsigned*)params[2]; a[3] = *(CUdeviceptr*)params[3];
      break;
    case 3:  // (ptr, ptr, unsigned)
      a[0] = *(CUdeviceptr*)params[0]; a[1] = *(CUdeviceptr*)params[1]; a[2] = *(unsigned*)params[2];
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  const int kind = fn->kind, d = current->device;
  enqueue(reinterpret_cast<stream_t*>(s), [=] { return emulate(kind, d, a[0], a[1], a[2], a[3]); });
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* b, int len, CUdevice d) { snprintf(b, len, "0000:%02x:00.0", 0x10 + d); return CUDA_SUCCESS; }
CUresult cuDeviceGetByPCIBusId(CUdevice* d, const char* b) { unsigned x = 0; if (sscanf(b, "0000:%02x", &x) != 1) return CUDA_ERROR_INVALID_VALUE; *d = (int)x - 0x10; return CUDA_SUCCESS; }
CUresult cuDeviceCanAccessPeer(int* can, CUdevice a, CUdevice b) { *can = peer_capable() && a != b; return CUDA_SUCCESS; }
CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned) {
  if (need_ctx()) return need_ctx();
  auto* p = reinterpret_cast<ctx_t*>(peer);
  if (!peer_capable() || p == current) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  guard l(mu);
  if (current->peers.count(p->device)) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  current->peers[p->device] = true;
  return CUDA_SUCCESS;
}

struct ipc_payload { std::uint64_t magic, pid, fd, size, offset; };
CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  guard l(mu);
  auto it = allocs.find(p);
  if (it == allocs.end() || it->second.kind != k_device) { fail("cuIpcGetMemHandle: not an allocation base"); return CUDA_ERROR_INVALID_VALUE; }
  memset(h, 0, sizeof *h);
  ipc_payload pl{0xfeedcafe, (std::uint64_t)getpid(), (std::uint64_t)it->second.fd, it->second.size, 0};
  memcpy(h->reserved, &pl, sizeof pl);
  return CUDA_SUCCESS;
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle h, unsigned) {
  if (need_ctx()) return need_ctx();
  ipc_payload pl;
  memcpy(&pl, h.reserved, sizeof pl);
  if (pl.magic != 0xfeedcafe) return CUDA_ERROR_INVALID_HANDLE;
  if (pl.pid == (std::uint64_t)getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  std::string path = "/proc/" + std::to_string(pl.pid) + "/fd/" + std::to_string(pl.fd);
  int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  void* m = mmap(nullptr, pl.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  guard l(mu);
  allocs[(std::uint64_t)m] = {(std::uint64_t)m, pl.size, current->device, k_ipc, 0, fd};
  *p = (CUdeviceptr)m;
  return CUDA_SUCCESS;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  guard l(mu);
  auto it = allocs.find(p);
  if (it == allocs.end() || it->second.kind != k_ipc) return CUDA_ERROR_INVALID_VALUE;
  munmap((void*)p, it->second.size);
  close(it->second.fd);
  allocs.erase(it);
  return CUDA_SUCCESS;
}

}  // extern "C"
extern "C" CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  if (!stream_ok(st, "cuMemcpyDtoDAsync") || !device_ptr(d, n, "DtoD dst") || !device_ptr(s, n, "DtoD src")) return CUDA_ERROR_INVALID_VALUE;
  enqueue(reinterpret_cast<stream_t*>(st), [=] { return copy_checked(d, s, n, "DtoDAsync"); });
  return CUDA_SUCCESS;
}
