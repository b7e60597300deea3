// The GPU KV store without a GPU: its bookkeeping (placement on a tier,
// demotion to the host tier and out, the core LRU order per tier, capacity
// accounting, evacuation of a slab), the host checksum the kernels must agree
// with, the export descriptor, the configuration's checks, and the kernels
// compiling with NVRTC.
#include "device.hpp"
#include "layout.hpp"
#include "transfer_plan.hpp"

#include "gpu/loader/nvrtc.hpp"

#include <specgen/gpu/kv_store.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string_view>

using namespace specgen;
using namespace specgen::gpu;
using kv_detail::host_tier;
using kv_detail::layout;
using kv_detail::slot_ref;

namespace {

std::vector<std::uint64_t> keys(std::uint64_t first, std::size_t n) {
  std::vector<std::uint64_t> k(n);
  std::iota(k.begin(), k.end(), first);
  return k;
}

/// Memory for slabs: a number of slabs each tier may still allocate, `slots` slots each.
struct fake_memory {
  std::map<int, int> slabs_left;
  std::uint32_t slots = 4;
  std::uint32_t next = 1;
  layout::grow_fn grow() {
    return [this](int tier) -> std::optional<std::pair<std::uint32_t, std::uint32_t>> {
      if (slabs_left[tier] <= 0) return std::nullopt;
      --slabs_left[tier];
      return std::pair{next++, slots};
    };
  }
};

/// Every held block sits in exactly one slot, and every tier's counts add up.
void check_accounting(const layout& l, const std::vector<std::uint64_t>& universe) {
  std::set<std::tuple<int, std::uint32_t, std::uint32_t>> used;
  std::map<int, std::size_t> per_tier;
  for (auto k : universe)
    if (const auto* b = l.find(k)) {
      CHECK(used.insert({b->at.tier, b->at.slab, b->at.slot}).second);
      ++per_tier[b->at.tier];
    }
  for (int t = host_tier; t < l.device_tiers(); ++t) {
    CHECK(l.blocks(t) == per_tier[t]);
    CHECK(l.blocks(t) + l.free_slots(t) == l.slots(t));
  }
}

}  // namespace

TEST_CASE("a transfer groups its blocks by tier, in the order asked for, and names the first block not stored") {
  using namespace kv_detail;
  layout l(2);
  fake_memory mem{.slabs_left = {{0, 1}, {1, 1}, {host_tier, 1}}, .slots = 4};
  l.place(keys(100, 2), 0, mem.grow());
  l.place(keys(200, 2), 1, mem.grow());
  const std::vector<std::uint64_t> ask{200, 100, 201, 101};
  const auto src = group_by_tier(l, ask);
  CHECK_FALSE(src.missing);
  REQUIRE(src.by_tier.size() == 2);
  CHECK(src.by_tier.at(0) == std::vector<transfer_item>{{1, l.find(100)->at}, {3, l.find(101)->at}});
  CHECK(src.by_tier.at(1) == std::vector<transfer_item>{{0, l.find(200)->at}, {2, l.find(201)->at}});
  const std::vector<std::uint64_t> gap{100, 7, 8};
  CHECK(group_by_tier(l, gap).missing == 7u);
}

TEST_CASE("a transfer's route, chunk size and copies per chunk") {
  using namespace kv_detail;
  CHECK(choose_route(true, false) == transfer_route::to_host);
  CHECK(choose_route(true, true) == transfer_route::to_host);
  CHECK(choose_route(false, true) == transfer_route::peer);
  CHECK(choose_route(false, false) == transfer_route::via_host);

  CHECK(chunk_size(0, 9) == 9);  // no limit: one chunk
  CHECK(chunk_size(4, 9) == 4);
  CHECK(chunk_size(16, 9) == 9);

  // Destination positions 3, 4, 5, 9, 10, 0: three runs; offsets in bytes (8 per block).
  const std::vector<transfer_item> chunk{{3, {}}, {4, {}}, {5, {}}, {9, {}}, {10, {}}, {0, {}}};
  CHECK(chunk_runs(chunk, 8) == std::vector<copy_run>{{24, 0, 24}, {72, 24, 16}, {0, 40, 8}});
  CHECK(chunk_runs(std::span(chunk).subspan(1, 1), 8) == std::vector<copy_run>{{32, 0, 8}});
  CHECK(chunk_runs({}, 8).empty());
}

TEST_CASE("placement fills free slots, then grows, then moves the least recently used block down a tier") {
  layout l(1);
  fake_memory mem{.slabs_left = {{0, 1}, {host_tier, 1}}, .slots = 4};
  const auto a = keys(100, 4);
  auto p = l.place(a, 0, mem.grow());
  CHECK(p.placed.size() == 4);
  CHECK(p.moved.empty());
  CHECK(p.dropped.empty());
  CHECK(l.blocks(0) == 4);
  CHECK(l.slots(0) == 4);

  const auto b = keys(200, 2);
  p = l.place(b, 0, mem.grow());  // the GPU cannot grow: a's tail goes to the host tier
  REQUIRE(p.moved.size() == 2);
  CHECK(p.demoted == 2);
  CHECK(p.moved[0].key == a[3]);  // the chain's tail first: the head serves every longer prefix
  CHECK(p.moved[1].key == a[2]);
  CHECK(p.moved[0].to.tier == host_tier);
  CHECK(p.moved[0].from == l.find(b[0])->at);  // the freed slot is reused at once
  CHECK(l.find(a[3])->at.tier == host_tier);
  CHECK(l.blocks(0) == 4);
  CHECK(l.blocks(host_tier) == 2);
  check_accounting(l, keys(0, 1000));
}

TEST_CASE("the host tier drops its least recently used blocks, and a GPU with no room at all sends blocks straight down") {
  layout l(1);
  fake_memory mem{.slabs_left = {{0, 1}, {host_tier, 1}}, .slots = 2};
  l.place(keys(100, 2), 0, mem.grow());
  l.place(keys(200, 2), 0, mem.grow());  // 100, 101 move to the host tier
  CHECK(l.lru_order(host_tier) == std::vector<std::uint64_t>{101, 100});
  const auto p = l.place(keys(300, 2), 0, mem.grow());  // 200, 201 move down; 100, 101 leave
  CHECK(p.dropped == std::vector<std::uint64_t>{101, 100});
  CHECK(p.demoted == 2);
  CHECK_FALSE(l.find(100));
  check_accounting(l, keys(0, 1000));

  layout none(1);  // a GPU without slabs that cannot grow
  fake_memory host_only{.slabs_left = {{0, 0}, {host_tier, 1}}, .slots = 4};
  const auto q = none.place(keys(1, 3), 0, host_only.grow());
  CHECK(q.placed.size() == 3);
  CHECK(none.blocks(host_tier) == 3);
  CHECK(none.blocks(0) == 0);

  layout nowhere(1);  // nothing anywhere: the blocks are reported, not stored
  fake_memory empty{.slabs_left = {}, .slots = 4};
  CHECK(nowhere.place(keys(1, 3), 0, empty.grow()).dropped == keys(1, 3));
  CHECK(nowhere.size() == 0);
}

TEST_CASE("a placement never evicts its own blocks, and blocks read recently stay longest") {
  layout l(1);
  fake_memory mem{.slabs_left = {{0, 1}}, .slots = 4};  // no host tier
  l.place(keys(10, 2), 0, mem.grow());
  l.place(keys(20, 2), 0, mem.grow());
  l.touch(keys(10, 2));  // a fork read chain 10
  const auto p = l.place(std::vector<std::uint64_t>{20, 30}, 0, mem.grow());  // 20 held, 30 new: 21 must go
  CHECK(p.dropped == std::vector<std::uint64_t>{21});
  CHECK(l.find(20));
  CHECK(l.find(10));
  CHECK(l.find(11));

  // A placement larger than the tier keeps what fits and reports the rest.
  layout small(1);
  fake_memory two{.slabs_left = {{0, 1}}, .slots = 2};
  const auto big = small.place(keys(1, 3), 0, two.grow());
  CHECK(big.placed.size() == 2);
  CHECK(big.dropped == std::vector<std::uint64_t>{3});
}

TEST_CASE("a block moved down and dropped within one placement leaves no copy into the slot reused") {
  layout l(1);
  fake_memory mem{.slabs_left = {{0, 1}, {host_tier, 1}}, .slots = 2};
  l.place(keys(1, 2), 0, mem.grow());          // GPU: 1, 2
  l.place(keys(3, 2), 0, mem.grow());          // GPU: 3, 4; host: 1, 2
  const auto p = l.place(keys(5, 4), 0, mem.grow());  // 3, 4 move down, then 5 and 6 push them out again
  std::set<std::tuple<int, std::uint32_t, std::uint32_t>> destinations;
  for (const auto& m : p.moved) {
    CHECK(destinations.insert({m.to.tier, m.to.slab, m.to.slot}).second);
    CHECK(l.find(m.key));  // every copy left in the plan is for a block still held
  }
  for (const auto& [k, at] : p.placed)
    for (const auto& m : p.moved) CHECK_FALSE(m.to == at);
  CHECK(p.demoted == p.moved.size());
  check_accounting(l, keys(0, 100));
}

TEST_CASE("evacuating a slab compacts into free slots first, then moves down, then drops") {
  layout l(1);
  fake_memory mem{.slabs_left = {{0, 2}, {host_tier, 1}}, .slots = 4};
  l.place(keys(1, 6), 0, mem.grow());  // slab 1 full, slab 2 half
  l.remove(1);
  l.remove(2);  // slab 1 has 2 free slots now
  const auto slabs = l.slabs(0);
  REQUIRE(slabs.size() == 2);
  CHECK(l.live(0, slabs[0]) == 2);
  CHECK(l.live(0, slabs[1]) == 2);
  const auto id = l.emptiest(0, {});
  REQUIRE(id);
  CHECK(*id == slabs[1]);  // the newest among equals: older slabs fill first, newer ones drain first
  const auto p = l.evacuate(0, *id, mem.grow());
  CHECK(p.compacted == 2);
  CHECK(p.demoted == 0);
  for (const auto& m : p.moved) CHECK(m.to.slab == slabs[0]);
  l.remove_slab(0, *id);
  CHECK(l.slots(0) == 4);
  check_accounting(l, keys(0, 100));

  // Nowhere on the GPU: down to the host tier; with the host tier full: out.
  const auto q = l.evacuate(0, slabs[0], mem.grow());
  CHECK(q.demoted == 4);
  CHECK(l.blocks(host_tier) == 4);
  CHECK_THROWS_AS(l.remove_slab(0, 12345), std::logic_error);
  l.remove_slab(0, slabs[0]);
  CHECK(l.slots(0) == 0);
  const auto host = l.slabs(host_tier);
  const auto r = l.evacuate(host_tier, host[0], mem.grow());
  CHECK(r.dropped.size() == 4);
  CHECK(l.size() == 0);

  layout busy(1);
  fake_memory one{.slabs_left = {{0, 1}}, .slots = 2};
  busy.place(keys(1, 1), 0, one.grow());
  CHECK_THROWS_AS(busy.remove_slab(0, busy.slabs(0)[0]), std::logic_error);
  CHECK_FALSE(busy.emptiest(0, [](std::uint32_t) { return false; }));  // e.g. every slab exported
}

TEST_CASE("capacity accounting holds through a long random sequence of puts, reads, removals and evacuations") {
  layout l(2);
  fake_memory mem{.slabs_left = {{0, 3}, {1, 2}, {host_tier, 2}}, .slots = 8};
  std::mt19937_64 rng(7);
  const auto universe = keys(1, 400);
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    const std::uint64_t first = 1 + rng() % 390;
    const std::size_t n = 1 + rng() % 10;
    const auto chain = keys(first, n);
    if (op < 5) {
      const auto p = l.place(chain, static_cast<int>(rng() % 2), mem.grow());
      for (const auto& [k, at] : p.placed) CHECK(l.find(k)->at == at);
      for (auto k : p.dropped) CHECK_FALSE(l.find(k));
    } else if (op < 7) {
      l.touch(chain);
    } else if (op < 9) {
      for (auto k : chain) l.remove(k);
    } else {
      const int tier = static_cast<int>(rng() % 2);
      if (auto id = l.emptiest(tier, {})) {
        l.evacuate(tier, *id, {});
        l.remove_slab(tier, *id);
        ++mem.slabs_left[tier];
      }
    }
    if (step % 100 == 0) check_accounting(l, universe);
  }
  check_accounting(l, universe);
}

TEST_CASE("the block checksum depends on every word and its position") {
  std::vector<std::byte> a(4096);
  specgen::detail::synthetic_block(42, {}, a);
  const auto sum = kv_block_checksum(a);
  auto b = a;
  b[4095] ^= std::byte{1};
  CHECK(kv_block_checksum(b) != sum);
  auto swapped = a;
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);  // two words trade places
  CHECK(kv_block_checksum(swapped) != sum);
  // The definition the kernel implements, word by word.
  std::uint64_t want = 0;
  for (std::size_t j = 0; j < a.size() / 8; ++j) {
    std::uint64_t w = 0;
    std::memcpy(&w, a.data() + 8 * j, 8);  // little-endian host
    want += specgen::detail::block_mix(w + (j + 1) * 0xd1b54a32d192ed03ull);
  }
  CHECK(sum == want);
  CHECK(kv_block_checksum(std::vector<std::byte>(64)) != 0);  // zeros are not a neutral block
}

TEST_CASE("an export descriptor round-trips through JSON and a malformed one is an error") {
  kv_export e{.lease = 7,
              .block_bytes = 4u << 20,
              .checksums = true,
              .slabs = {{"0000:3b:00.0", std::string(128, 'a'), 268439552, 268435456}},
              .blocks = {{0x1234, 0, 3}, {0xfffffffffffffff0ull, 0, 0}}};
  const nlohmann::json j = e;
  CHECK(j.at("blocks").at(1).at("key").get<std::uint64_t>() == 0xfffffffffffffff0ull);
  CHECK(j.get<kv_export>() == e);
  CHECK(nlohmann::json::parse(j.dump()).get<kv_export>() == e);
  nlohmann::json broken = j;
  broken.erase("slabs");
  CHECK_THROWS_WITH(broken.get<kv_export>(), "/slabs: missing (required)");
  nlohmann::json no_bytes = j;
  no_bytes["slabs"][0].erase("bytes");
  CHECK_THROWS_WITH(no_bytes.get<kv_export>(), "/slabs/0/bytes: missing (required)");
  nlohmann::json wrong = j;
  wrong["blocks"][1]["slot"] = "three";
  CHECK_THROWS_WITH(wrong.get<kv_export>(), Catch::Contains("/blocks/1/slot: expected") && Catch::Contains("string"));
  nlohmann::json negative = j;
  negative["lease"] = -1;
  CHECK_THROWS_WITH(negative.get<kv_export>(), Catch::StartsWith("/lease: "));
}

TEST_CASE("IPC handles travel as hex and bad hex is refused") {
  std::vector<std::byte> raw(64);
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>(i * 37);
  const auto hex = kv_detail::to_hex(raw);
  CHECK(hex.size() == 128);
  std::vector<std::byte> back(64);
  CHECK(kv_detail::from_hex(hex, back));
  CHECK(back == raw);
  CHECK_FALSE(kv_detail::from_hex(hex.substr(2), back));
  CHECK_FALSE(kv_detail::from_hex(std::string(128, 'g'), back));
}

TEST_CASE("a store configuration says what is wrong with it") {
  CHECK(kv_store_config{}.invalid().empty());
  CHECK_THAT(kv_store_config{.block_bytes = 24}.invalid(), Catch::Matchers::Contains("multiple of 16"));
  CHECK_THAT((kv_store_config{.devices = {0, 0}}).invalid(), Catch::Matchers::Contains("listed twice"));
  CHECK_THAT(kv_store_config{.consumer_device = -2}.invalid(), Catch::Matchers::Contains("consumer_device"));
  CHECK(nlohmann::json(kv_store_config{}).at("chunk_bytes") == 256u << 20);
  CHECK(kv_store_config{}.block_bytes == kv_model{}.bytes_per_block());
}

TEST_CASE("without a GPU, creating a store is an error that says so") {
  const auto& driver = gpu::detail::load_driver();
  if (driver) {
    WARN("a driver is present: this case is for machines without one");
    return;
  }
  auto s = kv_store::create({.block_bytes = 4096});
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Matchers::StartsWith("no GPU: "));
  auto kv = make_gpu_kv(kv_model{}, {});
  REQUIRE_FALSE(kv);
  CHECK_THAT(kv.error().message, Catch::Matchers::StartsWith("no GPU: "));
  CHECK_FALSE(kv_client::open(0));
}

TEST_CASE("the store's kernels compile with NVRTC for Hopper") {
  if (auto nv = gpu::detail::load_nvrtc(); !nv) {
    WARN("NVRTC unavailable: " << nv.error().message);
    return;
  }
  const auto cubin = kv_detail::compile_kernels("sm_90a");
  REQUIRE(cubin);
  const std::string_view image(cubin->data(), cubin->size());
  for (const char* k : {"specgen_kv_copy", "specgen_kv_checksum", "specgen_kv_fill", "specgen_kv_set"})
    CHECK(image.find(k) != std::string_view::npos);
  const auto bad = kv_detail::compile_kernels("sm_1");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Matchers::Contains("sm_1"));
}
