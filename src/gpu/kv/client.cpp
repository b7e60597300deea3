// kv_client: the other side of an export, in another process. Opens the
// slabs' CUDA IPC handles and gathers the blocks with the store's own kernel.
// A block counts only if its tag ({key, checksum}, written by the store after
// the bytes and cleared before a slot is reused) names the expected key both
// before and after the copy, and, when the store verifies, its checksum holds.
#include "device.hpp"

#include <specgen/gpu/kv_store.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

using namespace kv_detail;

struct kv_client_state {
  explicit kv_client_state(const driver_api& a) : api(a) {}
  ~kv_client_state() {
    context_scope scope(api);
    unmap();
    device.reset();
  }
  void unmap() {
    if (!device || mapped.empty() || !device->use()) return;
    (void)device->synchronize();  // no copy may still read a mapping
    for (auto& [hex, p] : mapped) api.cuIpcCloseMemHandle(p);
    mapped.clear();
  }

  const driver_api& api;
  std::unique_ptr<kv_device> device;
  std::map<std::string, CUdeviceptr> mapped;  // by handle
};

}  // namespace detail

using detail::kv_client_state;
using kv_detail::context_scope;

expected<std::unique_ptr<kv_client>, error> kv_client::open(int device) {
  const auto& api = gpu::detail::load_driver();
  if (!api) return unexpected(error{"no GPU: " + api.error().message});
  auto s = std::make_unique<kv_client_state>(**api);
  context_scope scope(**api);
  auto d = kv_detail::kv_device::open(**api, device);
  if (!d) return unexpected(error{fmt::format("GPU {}: {}", device, d.error().message)});
  s->device = std::move(*d);
  return std::unique_ptr<kv_client>(new kv_client(std::move(s)));
}

kv_client::kv_client(std::unique_ptr<kv_client_state> s) : state_(std::move(s)) {}
kv_client::~kv_client() = default;

int kv_client::device() const noexcept { return state_->device->ordinal; }

void kv_client::unmap() { state_->unmap(); }

expected<kv_client_fetch, error> kv_client::fetch(const kv_export& e, std::uint64_t address) {
  auto& s = *state_;
  const auto& api = s.api;
  kv_detail::kv_device& d = *s.device;
  const std::uint64_t bb = e.block_bytes;
  if (bb == 0 || bb % 16 != 0) return unexpected(error{fmt::format("kv_client: block_bytes {} is not a positive multiple of 16", bb)});
  if (address % 16 != 0) return unexpected(error{"kv_client: the destination must be 16-byte aligned"});
  // Never trust an offset from outside: every block and tag must lie inside its slab.
  for (const auto& b : e.blocks) {
    if (b.slab >= e.slabs.size()) return unexpected(error{fmt::format("kv_client: block names slab {} of {}", b.slab, e.slabs.size())});
    const auto& sl = e.slabs[b.slab];
    if ((std::uint64_t(b.slot) + 1) * bb > sl.tags_offset || sl.tags_offset + (std::uint64_t(b.slot) + 1) * 16 > sl.bytes ||
        sl.tags_offset % 16 != 0)
      return unexpected(error{fmt::format("kv_client: block {:016x} at slot {} lies outside its slab", b.key, b.slot)});
  }
  context_scope scope(api);
  SPECGEN_KV_TRY(d.use());
  std::vector<CUdeviceptr> base(e.slabs.size(), 0);
  for (std::size_t i = 0; i < e.slabs.size(); ++i) {
    const auto& hex = e.slabs[i].ipc_handle;
    if (auto it = s.mapped.find(hex); it != s.mapped.end()) {
      base[i] = it->second;
      continue;
    }
    CUipcMemHandle h{};
    if (!kv_detail::from_hex(hex, std::as_writable_bytes(std::span(h.reserved, sizeof h.reserved))))
      return unexpected(error{"kv_client: an IPC handle is not 128 hex digits"});
    CUdeviceptr p = 0;
    // Lazy peer access: a slab on another GPU is read over NVLink by this GPU's gather.
    SPECGEN_KV_TRY(kv_detail::check(api, api.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                                    fmt::format("cuIpcOpenMemHandle (slab on {}) on GPU {}", e.slabs[i].pci_bus_id, d.ordinal)));
    s.mapped.emplace(hex, p);
    base[i] = p;
  }

  const std::size_t n = e.blocks.size();
  kv_client_fetch r;
  r.transfer.bytes = n * bb;
  if (n == 0) return r;
  SPECGEN_KV_TRY(d.reserve_arena(n * kv_detail::kv_device::arena_bytes_per_block + (64u << 10)));
  std::vector<std::uint64_t> data, tags, to;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& b = e.blocks[i];
    data.push_back(base[b.slab] + std::uint64_t(b.slot) * bb);
    tags.push_back(base[b.slab] + e.slabs[b.slab].tags_offset + std::uint64_t(b.slot) * 16);
    to.push_back(address + std::uint64_t(i) * bb);
  }
  auto before = d.zeroed_words(d.compute, 2 * n);
  auto after = before ? d.zeroed_words(d.compute, 2 * n) : before;
  if (!after) return unexpected(after.error());
  auto dense = [&](const kv_detail::kv_device::words& w) {
    std::vector<std::uint64_t> at(n);
    for (std::size_t i = 0; i < n; ++i) at[i] = w.device + 16 * i;
    return at;
  };
  const auto start = std::chrono::steady_clock::now();
  // Tags, bytes, tags again, in stream order: a slot reused during the copy shows in the second read.
  SPECGEN_KV_TRY(d.copy_blocks(d.compute, tags, dense(*before), 16));
  SPECGEN_KV_TRY(d.copy_blocks(d.compute, data, to, bb));
  SPECGEN_KV_TRY(d.copy_blocks(d.compute, tags, dense(*after), 16));
  SPECGEN_KV_TRY(d.download(d.compute, *before));
  SPECGEN_KV_TRY(d.download(d.compute, *after));
  SPECGEN_KV_TRY(d.synchronize());
  r.transfer.time = std::chrono::duration_cast<duration>(std::chrono::steady_clock::now() - start);
  r.transfer.gathers = 1;
  std::vector<std::uint64_t> sums(n, 0);
  if (e.checksums) {
    auto w = d.zeroed_words(d.compute, n);
    if (!w) return unexpected(w.error());
    SPECGEN_KV_TRY(d.checksum_blocks(d.compute, to, bb, w->device));
    SPECGEN_KV_TRY(d.download(d.compute, *w));
    SPECGEN_KV_TRY(d.synchronize());
    std::copy(w->host, w->host + n, sums.begin());
  }
  bool intact = true;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t key = e.blocks[i].key;
    const bool fresh = before->host[2 * i] == key && after->host[2 * i] == key && before->host[2 * i + 1] == after->host[2 * i + 1];
    const bool sound = !e.checksums || sums[i] == before->host[2 * i + 1];
    if (!fresh) ++r.stale;
    else if (!sound) ++r.corrupt;
    intact = intact && fresh && sound;
    if (intact) ++r.blocks;
  }
  return r;
}

expected<std::vector<std::byte>, error> kv_client::fetch_to_host(const kv_export& e, kv_client_fetch* report) {
  auto& s = *state_;
  const auto& api = s.api;
  context_scope scope(api);
  SPECGEN_KV_TRY(s.device->use());
  const std::uint64_t bytes = std::max<std::uint64_t>(16, std::uint64_t(e.blocks.size()) * e.block_bytes);
  CUdeviceptr buf = 0;
  SPECGEN_KV_TRY(kv_detail::check(api, api.cuMemAlloc(&buf, bytes), fmt::format("cuMemAlloc of {} bytes", bytes)));
  auto r = fetch(e, buf);
  std::vector<std::byte> out;
  expected<void, error> copied;
  if (r) {
    out.resize(r->blocks * e.block_bytes);
    if (!out.empty()) {
      (void)s.device->use();
      copied = kv_detail::check(api, api.cuMemcpyDtoH(out.data(), buf, out.size()), "copying the blocks to the host");
    }
  }
  (void)s.device->use();
  api.cuMemFree(buf);
  if (!r) return unexpected(r.error());
  if (!copied) return unexpected(copied.error());
  if (report) *report = *r;
  return out;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
