// The GPU KV store on real GPUs: blocks come back byte for byte on one GPU,
// across GPUs (peer to peer and through pinned memory) and across processes;
// corruption is caught; the host tier takes evicted blocks; the store shrinks
// for another process's allocation; a concurrent stress run corrupts nothing.
// Every case SKIPs (WARN "no GPU: <reason>") without a GPU, and the two-GPU
// cases on a machine with one.
#include "device.hpp"
#include "stress.hpp"

#include "gpu/loader/nvrtc.hpp"

#include <specgen/gpu/kv_store.hpp>
#include <specgen/gpu/device_info.hpp>
#include <specgen/policy/kv.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>
#include <string>

using namespace specgen;
using namespace specgen::policy;
using namespace specgen::gpu;
using kv_detail::count_corrupted;
using kv_detail::stress_buffer;
using kv_detail::stress_chain;

namespace {

std::optional<std::string> no_gpu_reason() {
  auto n = device_count();
  if (!n) return n.error().message;
  if (*n == 0) return "the driver reports no devices";
  if (auto nv = gpu::detail::load_nvrtc(); !nv) return nv.error().message;
  return std::nullopt;
}

/// The number of GPUs, or 0 after a WARN saying why there is none (the case then returns: SKIP).
int gpus() {
  static const std::optional<std::string> reason = no_gpu_reason();
  if (reason) {
    WARN("no GPU: " << *reason);
    return 0;
  }
  return *device_count();
}

bool two_gpus() {
  const int n = gpus();
  if (n == 1) WARN("one GPU: this case needs two");
  return n >= 2;
}

const gpu::detail::driver_api& api() { return **gpu::detail::load_driver(); }

/// Runs `f` with GPU `device`'s primary context current (the caller's restored after).
template <class F>
auto in_primary_context(int device, F&& f) {
  kv_detail::context_scope scope(api());
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  api().cuDeviceGet(&dev, device);
  api().cuDevicePrimaryCtxRetain(&ctx, dev);
  api().cuCtxSetCurrent(ctx);
  struct release {
    CUdevice dev;
    ~release() { api().cuDevicePrimaryCtxRelease(dev); }
  } guard{dev};
  return f();
}

constexpr std::size_t small_block = 64 << 10;  // 64 KiB: many blocks, quick tests

/// Small blocks, checksums on, little reserve (an H200 has room to spare).
kv_store_config small(std::vector<int> devices, int consumer = 0) {
  return {.block_bytes = small_block,
          .devices = std::move(devices),
          .device_capacity_bytes = 1ull << 30,
          .reserve_bytes = 1ull << 30,
          .host_capacity_bytes = 256ull << 20,
          .slab_bytes = 4ull << 20,
          .chunk_bytes = 1ull << 20,  // 16 blocks: a chain of 64 moves in four chunks, double-buffered
          .consumer_device = consumer,
          .peer_to_peer = true,
          .verify = true,
          .pressure_hold_seconds = 10};
}

std::shared_ptr<kv_store> open_store(const kv_store_config& c) {
  auto s = kv_store::create(c);
  if (!s) FAIL("kv_store::create: " << s.error().message);
  return *s;
}

std::vector<std::byte> synthetic(std::span<const std::uint64_t> keys, std::size_t bb) {
  std::vector<std::byte> out(keys.size() * bb);
  for (std::size_t i = 0; i < keys.size(); ++i) specgen::detail::synthetic_block(keys[i], {}, std::span(out).subspan(i * bb, bb));
  return out;
}

/// Runs `cmd`, returning its exit status and standard output.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string write_export(const kv_export& e) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("specgen-kv-export-{}-{}.json", ::getpid(), e.lease);
  std::ofstream(path) << nlohmann::json(e).dump();
  return path.string();
}

}  // namespace

TEST_CASE("blocks put on a GPU come back byte for byte, in one gather, with their checksums") {
  if (!gpus()) return;
  auto store = open_store(small({0}));
  const auto keys = stress_chain(1, 64);
  REQUIRE(store->put_synthetic(keys));
  REQUIRE(store->locate(keys[0]));
  CHECK(store->locate(keys[0])->device == 0);
  CHECK(store->locate(keys[0])->checksum == kv_block_checksum(synthetic(std::span(keys).first(1), small_block)));
  CHECK(store->resident(keys) == 64);

  std::vector<std::byte> host(keys.size() * small_block);
  auto took = store->get(keys, host);
  REQUIRE(took);
  CHECK(*took > duration(0));
  CHECK(count_corrupted(keys, host, small_block) == 0);

  stress_buffer buf(api(), 0, keys.size() * small_block);
  auto t = store->fetch_to(keys, 0, buf.address());
  REQUIRE(t);
  CHECK(t->gathers == 1);  // same GPU: the destination is the contiguous buffer
  CHECK(t->copies == 0);
  CHECK(t->bytes == keys.size() * small_block);
  std::fill(host.begin(), host.end(), std::byte{0});
  REQUIRE(buf.read(host));
  CHECK(count_corrupted(keys, host, small_block) == 0);

  // Host bytes and device bytes go in too; the chain of a lease is found by its handle.
  const auto more = stress_chain(2, 20);
  REQUIRE(store->put(more, synthetic(more, small_block)));
  stress_buffer src(api(), 0, more.size() * small_block);
  REQUIRE(store->fetch_to(more, 0, src.address()));
  const auto third = stress_chain(3, 20);
  {  // third's bytes at src: put them from the device
    const auto bytes = synthetic(third, small_block);
    REQUIRE(in_primary_context(0, [&] { return api().cuMemcpyHtoD(src.address(), bytes.data(), bytes.size()); }) ==
            CUDA_SUCCESS);
  }
  REQUIRE(store->put_from_device(third, 0, src.address()));
  std::vector<std::byte> back(third.size() * small_block);
  REQUIRE(store->get(third, back));
  CHECK(count_corrupted(third, back, small_block) == 0);
  CHECK(store->chain(more.back()) == more);
  CHECK(store->chain(12345).empty());
  const auto st = store->stats();
  CHECK(st.put_blocks == 104);
  CHECK(st.corrupt == 0);
  CHECK(st.device_blocks == 104);
}

TEST_CASE("a corrupted block is caught at the fetch and dropped, and the fork recomputes") {
  if (!gpus()) return;
  auto store = open_store(small({0}));
  const auto keys = stress_chain(4, 16);
  REQUIRE(store->put_synthetic(keys));
  const auto where = store->locate(keys[5]);
  REQUIRE(where);
  // One byte of one block.
  REQUIRE(in_primary_context(0, [&] { return api().cuMemsetD8(where->address + 1000, 0xab, 1); }) == CUDA_SUCCESS);
  stress_buffer buf(api(), 0, keys.size() * small_block);
  auto t = store->fetch_to(keys, 0, buf.address());
  REQUIRE_FALSE(t);
  CHECK_THAT(t.error().message, Catch::Matchers::Contains("checksum"));
  CHECK(store->stats().corrupt == 1);
  CHECK(store->take_dropped() == std::vector<std::uint64_t>{keys[5]});
  CHECK(store->resident(keys) == 5);

  // Through the engine's policy: no lease (the fork recomputes), then stored again.
  const kv_model m{.layers = 1, .kv_heads = 2, .head_dim = 64, .dtype_bytes = 2, .block_tokens = 128};  // 64 KiB blocks
  policy::any_kv kv = make_gpu_kv(store, m);
  std::vector<token_id> prefix(128 * 8);
  std::iota(prefix.begin(), prefix.end(), 7);
  kv.store(1, prefix);
  auto l = kv.lease(prefix);
  REQUIRE(l);
  CHECK(l->cached_tokens == prefix.size());
  CHECK(l->fetch_time > duration(0));
  CHECK(store->chain(l->handle).size() == 8);
  const auto pkeys = block_keys(prefix, 128);
  const auto at = store->locate(pkeys[3]);
  REQUIRE(at);
  REQUIRE(in_primary_context(0, [&] { return api().cuMemsetD8(at->address, 0, 16); }) == CUDA_SUCCESS);
  CHECK_FALSE(kv.lease(prefix));
  kv.store(1, prefix);
  REQUIRE(kv.lease(prefix));
  CHECK(kv.lease(prefix)->cached_tokens == prefix.size());
}

TEST_CASE("blocks evicted from a GPU move to pinned host memory, are served from there, and leave it last") {
  if (!gpus()) return;
  auto c = small({0});
  c.slab_bytes = 8 * small_block;
  c.device_capacity_bytes = 2 * 8 * small_block + 1024;  // two slabs and their tags, not three
  c.host_capacity_bytes = 16 * small_block;
  auto store = open_store(c);
  const auto a = stress_chain(5, 16), b = stress_chain(6, 16), d = stress_chain(7, 16);
  REQUIRE(store->put_synthetic(a));
  CHECK(store->stats().device_blocks == 16);
  REQUIRE(store->put_synthetic(b));
  auto st = store->stats();
  CHECK(st.device_blocks == 16);
  CHECK(st.host_blocks == 16);
  CHECK(st.demoted == 16);
  CHECK(store->locate(a[0])->device == -1);
  CHECK(store->locate(b[0])->device == 0);

  stress_buffer buf(api(), 0, 32 * small_block);
  std::vector<std::byte> host(16 * small_block);
  auto t = store->fetch_to(a, 0, buf.address());  // the GPU reads the pinned slots itself
  REQUIRE(t);
  REQUIRE(buf.read(host));
  CHECK(count_corrupted(a, host, small_block) == 0);
  REQUIRE(store->get(a, host));
  CHECK(count_corrupted(a, host, small_block) == 0);

  // A third chain: b goes down, a (least recently used there) leaves the store.
  REQUIRE(store->put_synthetic(d));
  CHECK(store->resident(a) == 0);
  CHECK(store->resident(b) == 16);
  const auto dropped = store->take_dropped();
  CHECK(dropped.size() == 16);
  CHECK(std::is_permutation(dropped.begin(), dropped.end(), a.begin()));
  CHECK(store->stats().dropped == 16);
  CHECK_FALSE(store->fetch_to(a, 0, buf.address()));

  // A chain across both tiers fetches as one transfer, intact.
  std::vector<std::uint64_t> both(b.begin(), b.end());
  both.insert(both.end(), d.begin(), d.end());
  std::vector<std::byte> all(32 * small_block);
  REQUIRE(store->fetch_to(both, 0, buf.address()));
  REQUIRE(buf.read(all));
  CHECK(count_corrupted(both, all, small_block) == 0);
  CHECK(store->stats().corrupt == 0);

  // A lower capacity releases slabs.
  CHECK(store->shrink(8 * small_block) <= 8 * small_block);
  CHECK(store->stats().device_bytes.at(0) == 0);
}

TEST_CASE("blocks cross GPUs intact, peer to peer and through pinned memory, double-buffered in chunks") {
  if (!two_gpus()) return;
  for (const bool peer : {true, false}) {
    INFO("peer_to_peer = " << peer);
    auto c = small({1}, 0);
    c.peer_to_peer = peer;
    auto store = open_store(c);
    const auto keys = stress_chain(8, 200);  // 12.5 MiB: thirteen 1 MiB chunks
    REQUIRE(store->put_synthetic(keys));
    CHECK(store->locate(keys[0])->device == 1);
    stress_buffer buf(api(), 0, keys.size() * small_block);
    auto t = store->fetch_to(keys, 0, buf.address());
    REQUIRE(t);
    const auto st = store->stats();
    const bool direct = st.peer_copies > 0;  // peer access can be missing (no NVLink, no P2P over PCIe)
    if (peer && !direct) WARN("GPUs 1 and 0 cannot copy peer to peer: both rounds went through pinned memory");
    CHECK_FALSE((!peer && direct));
    CHECK(t->gathers == 13);
    CHECK(t->copies == (direct ? 13 : 26));  // through pinned memory: down and up per chunk
    CHECK((direct ? st.peer_copies : st.host_copies) == 13);
    std::vector<std::byte> host(keys.size() * small_block);
    REQUIRE(buf.read(host));
    CHECK(count_corrupted(keys, host, small_block) == 0);
    // Every block of a random subset, in a scattered order.
    std::vector<std::uint64_t> some;
    for (std::size_t i = 0; i < keys.size(); i += 7) some.push_back(keys[keys.size() - 1 - i]);
    REQUIRE(store->fetch_to(some, 0, buf.address()));
    std::vector<std::byte> part(some.size() * small_block);
    REQUIRE(buf.read(part));
    CHECK(count_corrupted(some, part, small_block) == 0);
  }

  // One chain spread over both GPUs and the host tier.
  auto c = small({0, 1}, 0);
  c.slab_bytes = 8 * small_block;
  c.device_capacity_bytes = 8 * small_block + 512;  // one slab each
  c.host_capacity_bytes = 64 * small_block;
  auto store = open_store(c);
  const auto keys = stress_chain(9, 20);
  REQUIRE(store->put_synthetic(std::span(keys).first(8)));
  REQUIRE(store->put_synthetic(std::span(keys).subspan(8, 8)));
  REQUIRE(store->put_synthetic(std::span(keys).subspan(16)));
  std::set<int> places;
  for (auto k : keys) places.insert(store->locate(k)->device);
  CHECK(places == std::set<int>{-1, 0, 1});
  stress_buffer buf(api(), 0, keys.size() * small_block);
  REQUIRE(store->fetch_to(keys, 0, buf.address()));
  std::vector<std::byte> host(keys.size() * small_block);
  REQUIRE(buf.read(host));
  CHECK(count_corrupted(keys, host, small_block) == 0);
}

TEST_CASE("another process maps exported blocks through IPC handles and finds them intact, or stale once reused") {
  const int n = gpus();
  if (!n) return;
  for (int holder = 0; holder < std::min(n, 2); ++holder) {
    INFO("blocks on GPU " << holder << ", read by a process on GPU 0");
    auto store = open_store(small({holder}));
    const auto keys = stress_chain(10, 32);
    REQUIRE(store->put_synthetic(keys));
    auto e = store->export_blocks(keys);
    REQUIRE(e);
    CHECK(e->blocks.size() == 32);
    CHECK(e->checksums);
    const auto file = write_export(*e);
    const auto [rc, out] = run(fmt::format("{} check {} 0", SPECGEN_KV_PEER, file));
    INFO(out);
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Matchers::Contains("\"good\":32") && Catch::Matchers::Contains("\"mismatched\":0"));
    store->release(e->lease);

    // Slots reused after the export: the tags say so, and nothing stale is served.
    auto e2 = store->export_blocks(keys);
    REQUIRE(e2);
    store->erase(keys);
    REQUIRE(store->put_synthetic(stress_chain(11, 32)));  // the same slots, other keys
    const auto file2 = write_export(*e2);
    const auto [rc2, out2] = run(fmt::format("{} check {} 0", SPECGEN_KV_PEER, file2));
    INFO(out2);
    CHECK(rc2 == 1);
    CHECK_THAT(out2, Catch::Matchers::Contains("\"good\":0") && Catch::Matchers::Contains("\"mismatched\":0"));
    store->release(e2->lease);
    std::filesystem::remove(file);
    std::filesystem::remove(file2);
  }
}

TEST_CASE("the store gives memory back when a worker needs it, and the worker's allocation succeeds") {
  if (!gpus()) return;
  auto free_on_0 = [] {
    return in_primary_context(0, [] {
      std::size_t f = 0, total = 0;
      api().cuMemGetInfo(&f, &total);
      return static_cast<std::uint64_t>(f);
    });
  };
  const std::uint64_t free0 = free_on_0();
  kv_store_config c{.block_bytes = 4u << 20,
                    .devices = {0},
                    .device_capacity_bytes = free0,
                    .reserve_bytes = std::min<std::uint64_t>(2ull << 30, free0 / 8),  // the worker's context fits in it
                    .host_capacity_bytes = 2ull << 30,
                    .slab_bytes = 256ull << 20,
                    .chunk_bytes = 256ull << 20,
                    .consumer_device = 0,
                    .peer_to_peer = true,
                    .verify = true,
                    .pressure_hold_seconds = 30};
  auto store = open_store(c);
  // Fill the GPU: everything above the reserve.
  for (int f = 0; f < 1000 && store->choose_device() == 0; ++f) {
    const auto keys = stress_chain(100 + f, 64);  // 256 MiB a chain
    REQUIRE(store->put_synthetic(keys));
    if (store->stats().demoted > 0) break;  // no more growth: the GPU is full
  }
  const auto filled = store->stats();
  // What an evaluation job asks for: more than the store left free (8 GiB on an H200).
  const std::uint64_t want = std::max<std::uint64_t>(std::min<std::uint64_t>(8ull << 30, free0 / 2), free_on_0() + (512ull << 20));
  INFO("store holds " << filled.device_bytes.at(0) / (1 << 20) << " MiB on GPU 0");
  CHECK(filled.device_bytes.at(0) > free0 / 2);
  const auto [rc0, out0] = run(fmt::format("{} alloc 0 {}", SPECGEN_KV_PEER, want));
  INFO(out0);
  CHECK(rc0 == 3);  // the store really holds the memory: without it making room, the worker fails

  const std::uint64_t free_after = store->make_room(0, want);
  CHECK(free_after >= want + c.reserve_bytes);
  CHECK(store->stats().slabs_freed > 0);
  const auto [rc1, out1] = run(fmt::format("{} alloc 0 {}", SPECGEN_KV_PEER, want));
  INFO(out1);
  CHECK(rc1 == 0);

  // Within the hold the store does not grow back into the room it made.
  REQUIRE(store->put_synthetic(stress_chain(5000, 64)));
  const auto [rc2, out2] = run(fmt::format("{} alloc 0 {}", SPECGEN_KV_PEER, want));
  INFO(out2);
  CHECK(rc2 == 0);
  // What survived is intact.
  const auto survivor = stress_chain(5000, 64);
  std::vector<std::byte> host(survivor.size() * c.block_bytes);
  REQUIRE(store->get(survivor, host));
  CHECK(count_corrupted(survivor, host, c.block_bytes) == 0);
  CHECK(store->stats().corrupt == 0);
}

TEST_CASE("concurrent puts, fetches, evictions and memory pressure corrupt no block") {
  const int n = gpus();
  if (!n) return;
  auto c = small(n >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0}, 0);
  c.slab_bytes = 16 * small_block;
  c.device_capacity_bytes = 8 * (16 * small_block + 512);  // 128 blocks a GPU: constant churn
  c.host_capacity_bytes = 96 * small_block;
  c.pressure_hold_seconds = 0.01;
  auto store = open_store(c);
  const auto r = kv_detail::run_stress(*store, {.threads = 4, .iterations = 300, .families = 8, .max_chain = 32,
                                                .max_room = 64ull << 20, .seed = 1});
  for (const auto& e : r.errors) UNSCOPED_INFO(e);
  CHECK(r.errors.empty());
  CHECK(r.fetched_blocks > 1000);
  CHECK(r.corrupted == 0);
  CHECK(r.checksum_failures == 0);
  CHECK(store->stats().corrupt == 0);
  CHECK(store->broken().empty());
  const auto st = store->stats();
  CHECK(st.demoted > 0);  // the run did exercise the tiers
}
