#include <specgen/policy/kv.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

using namespace specgen;
using namespace specgen::policy;

namespace {

std::vector<token_id> tokens(std::size_t n, token_id first = 0) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// 16 bytes per token, 64 bytes per 4-token block: small enough to check bytes.
constexpr kv_model tiny{.layers = 1, .kv_heads = 1, .head_dim = 4, .dtype_bytes = 2, .block_tokens = 4};

// Block bytes that encode the block's token ids, so a fetch can be checked.
void tokens_as_bytes(std::uint64_t, std::span<const token_id> t, std::span<std::byte> out) {
  std::memset(out.data(), 0, out.size());
  std::memcpy(out.data(), t.data(), std::min(out.size(), t.size_bytes()));
}

}  // namespace

TEST_CASE("the default KV model is a 32B-class model at 256 KiB per token") {
  constexpr kv_model m;
  CHECK(m.bytes_per_token() == 2ull * 64 * 8 * 128 * 2);
  CHECK(m.bytes_per_token() == 256 * 1024);
  CHECK(m.bytes_per_block() == 4ull << 20);
  CHECK(tiny.bytes_per_block() == 64);
}

TEST_CASE("block keys cover full blocks only") {
  CHECK(block_keys(tokens(35), 16).size() == 2);
  CHECK(block_keys(tokens(15), 16).empty());
  CHECK(block_keys(tokens(32), 16).size() == 2);
  CHECK_THROWS_AS(block_keys(tokens(32), 0), std::invalid_argument);
}

TEST_CASE("equal prefixes share block keys and a change affects its block and every later one") {
  const auto a = tokens(64);
  auto b = a;
  b.resize(50);  // same first 3 full blocks, then a partial one
  const auto ka = block_keys(a, 16), kb = block_keys(b, 16);
  REQUIRE(kb.size() == 3);
  CHECK(std::equal(kb.begin(), kb.end(), ka.begin()));

  auto c = a;
  c[20] = 999;  // inside block 1
  const auto kc = block_keys(c, 16);
  CHECK(kc[0] == ka[0]);
  CHECK(kc[1] != ka[1]);
  CHECK(kc[2] != ka[2]);  // the chain: later blocks depend on their parents
  CHECK(kc[3] != ka[3]);

  CHECK(block_keys(a, 16, 7)[0] != ka[0]);  // a salt separates key spaces
  CHECK(block_keys(a, 16) == ka);           // deterministic
}

TEST_CASE("block_index evicts least recently used blocks, a chain's tail before its head") {
  block_index idx(4);
  const auto a = block_keys(tokens(12), 4);       // 3 blocks
  const auto b = block_keys(tokens(8, 100), 4);   // 2 blocks
  CHECK(idx.insert(a, 1).inserted.size() == 3);
  CHECK(idx.lru_order() == std::vector<std::uint64_t>{a[0], a[1], a[2]});
  const auto r = idx.insert(b, 2);
  CHECK(r.inserted == b);
  CHECK(r.evicted == std::vector<std::uint64_t>{a[2]});
  CHECK(idx.lru_order() == std::vector<std::uint64_t>{b[0], b[1], a[0], a[1]});

  CHECK(idx.match(a) == 2);  // stops at the evicted block
  CHECK(idx.lru_order() == std::vector<std::uint64_t>{a[0], a[1], b[0], b[1]});
  const auto s = idx.stats();
  CHECK(s == block_index_stats{.hits = 2, .misses = 1, .evictions = 1, .resident = 4});
}

TEST_CASE("re-inserting a chain never evicts its own resident blocks") {
  block_index idx(3);
  const auto a = block_keys(tokens(12), 4);
  idx.insert(std::span(a).first(2), 1);
  idx.insert(block_keys(tokens(4, 500), 4), 2);  // the other block, now most recent
  const auto r = idx.insert(a, 1);               // needs one slot: the other block goes
  CHECK(r.inserted == std::vector<std::uint64_t>{a[2]});
  CHECK(r.evicted.size() == 1);
  CHECK(idx.match(a) == 3);
}

TEST_CASE("a chain longer than the capacity keeps its leading blocks") {
  block_index idx(2);
  const auto a = block_keys(tokens(20), 4);  // 5 blocks
  CHECK(idx.insert(a, 1).inserted == std::vector<std::uint64_t>{a[0], a[1]});
  CHECK(idx.match(a) == 2);
  CHECK(block_index(0).insert(a, 1).inserted.empty());
}

TEST_CASE("drop_owner frees a search's blocks but keeps blocks another search still holds") {
  block_index idx(16);
  const auto shared = block_keys(tokens(8), 4);
  const auto longer = block_keys(tokens(16), 4);  // shares 2 blocks with `shared`
  idx.insert(shared, 1);
  idx.insert(longer, 2);
  CHECK(idx.size() == 4);
  const auto freed = idx.drop_owner(2);
  CHECK(freed.size() == 2);
  CHECK(idx.match(shared) == 2);
  CHECK_FALSE(idx.contains(longer[2]));
  CHECK(idx.drop_owner(1).size() == 2);
  CHECK(idx.size() == 0);
  CHECK(idx.stats().evictions == 0);  // dropping is not evicting
}

TEST_CASE("shrink_to lowers the capacity and evicts least recently used blocks") {
  block_index idx(8);
  const auto a = block_keys(tokens(16), 4);
  const auto b = block_keys(tokens(16, 100), 4);
  idx.insert(a, 1);
  idx.insert(b, 1);
  const auto evicted = idx.shrink_to(5);
  CHECK(evicted == std::vector<std::uint64_t>{a[3], a[2], a[1]});
  CHECK(idx.capacity() == 5);
  CHECK(idx.stats().evictions == 3);
  CHECK(idx.match(b) == 4);
  CHECK(idx.match(a) == 1);
  CHECK(idx.shrink_to(9).empty());
  CHECK(idx.capacity() == 5);  // shrinking never grows
}

TEST_CASE("touch reorders resident blocks like a chain read and evict takes the coldest without lowering the capacity") {
  block_index idx(8);
  const auto a = block_keys(tokens(12), 4);
  const auto b = block_keys(tokens(8, 100), 4);
  idx.insert(a, 0);
  idx.insert(b, 0);
  CHECK(idx.lru_order() == std::vector<std::uint64_t>{b[0], b[1], a[0], a[1], a[2]});
  const std::vector<std::uint64_t> absent{12345};
  idx.touch(absent);  // absent keys are skipped
  idx.touch(std::span(a).subspan(1));
  CHECK(idx.lru_order() == std::vector<std::uint64_t>{a[1], a[2], b[0], b[1], a[0]});
  CHECK(idx.stats().hits == 0);  // touching is not a lookup

  CHECK(idx.evict(2) == std::vector<std::uint64_t>{a[0], b[1]});
  CHECK(idx.capacity() == 8);
  CHECK(idx.size() == 3);
  CHECK(idx.stats().evictions == 2);
  CHECK(idx.evict(10).size() == 3);
  CHECK(idx.evict(1).empty());
  CHECK(idx.insert(a, 0).inserted.size() == 3);  // room again: the capacity did not drop
}

TEST_CASE("synthetic block bytes are counter-based words a GPU can write in parallel") {
  std::vector<std::byte> out(40);
  detail::synthetic_block(7, {}, out);
  for (std::size_t j = 0; j < 5; ++j) {
    std::uint64_t w = 0;
    for (int b = 7; b >= 0; --b) w = (w << 8) | std::to_integer<std::uint64_t>(out[j * 8 + static_cast<std::size_t>(b)]);
    CHECK(w == detail::block_mix(7 + (j + 1) * 0x9e3779b97f4a7c15ull));
  }
  std::vector<std::byte> part(13), other(40);
  detail::synthetic_block(7, {}, part);  // a partial last word: its leading bytes
  CHECK(std::equal(part.begin(), part.end(), out.begin()));
  detail::synthetic_block(8, {}, other);
  CHECK(other != out);
}

TEST_CASE("a lease's fetch time is latency plus cached bytes over bandwidth") {
  remote_gpu_kv kv;  // 395 GB/s, 10 us, 4 MiB blocks
  const auto prefix = tokens(1024 + 5);
  CHECK_FALSE(kv.lease(prefix));
  kv.store(3, prefix);
  const auto l = kv.lease(prefix);
  REQUIRE(l);
  CHECK(l->cached_tokens == 1024);
  const double bytes = 64.0 * (4 << 20);
  CHECK(l->fetch_time == seconds(10e-6 + bytes / 395e9));
  CHECK(to_seconds(l->fetch_time) == Approx(689.58e-6).epsilon(1e-4));
  CHECK(l->handle == block_keys(prefix, 16).back());

  // A fork from a longer prefix gets what is cached of it.
  const auto longer = tokens(4096);
  const auto l2 = kv.lease(longer);
  REQUIRE(l2);
  CHECK(l2->cached_tokens == 1024);

  host_kv host{{.capacity_bytes = 1ull << 30, .bandwidth_gbps = 50, .latency_us = 20}};
  host.store(1, prefix);
  CHECK(host.lease(prefix)->fetch_time == seconds(20e-6 + bytes / 50e9));
}

TEST_CASE("modelled stores hold as many blocks as their capacity in bytes allows") {
  host_kv kv{{.model = tiny, .capacity_bytes = 10 * 64 + 63}};
  CHECK(kv.index().capacity() == 10);
  kv.store(1, tokens(4 * 12));
  CHECK(kv.lease(tokens(4 * 12))->cached_tokens == 40);
  kv.drop(1);
  CHECK_FALSE(kv.lease(tokens(4 * 12)));
  CHECK(kv.stats().resident == 0);
}

TEST_CASE("no_kv never leases") {
  no_kv kv;
  kv.store(0, tokens(64));
  CHECK_FALSE(kv.lease(tokens(64)));
}

TEST_CASE("backed_kv stores real bytes and fetches them in block order") {
  auto backing = std::make_unique<host_backing>(64 * 64, tiny.bytes_per_block());
  host_backing* raw = backing.get();
  backed_kv kv({.model = tiny}, std::move(backing), tokens_as_bytes);
  const auto prefix = tokens(4 * 5 + 2, 1000);
  kv.store(1, prefix);
  CHECK(raw->blocks() == 5);
  const auto l = kv.lease(prefix);
  REQUIRE(l);
  CHECK(l->cached_tokens == 20);
  CHECK(l->fetch_time >= duration(0));
  const auto bytes = kv.last_fetch();
  REQUIRE(bytes.size() == 5 * 64);
  for (std::size_t b = 0; b < 5; ++b) {
    token_id first = 0;
    std::memcpy(&first, bytes.data() + b * 64, sizeof first);
    CHECK(first == 1000 + static_cast<token_id>(4 * b));
  }
  kv.drop(1);
  CHECK(raw->blocks() == 0);
  CHECK_FALSE(kv.lease(prefix));
}

TEST_CASE("backed_kv's checksum catches corrupted bytes and the fork recomputes instead") {
  auto backing = std::make_unique<host_backing>(64 * 64, tiny.bytes_per_block());
  host_backing* raw = backing.get();
  backed_kv kv({.model = tiny}, std::move(backing));
  const auto prefix = tokens(16);
  kv.store(1, prefix);
  const auto keys = block_keys(prefix, tiny.block_tokens);
  raw->stored_bytes(keys[2])[7] ^= std::byte{0x40};

  CHECK_FALSE(kv.lease(prefix));
  CHECK_THAT(kv.last_error(), Catch::Matchers::Contains("checksum"));
  CHECK(kv.stats().resident == 0);  // the suspect transfer's blocks are gone
  CHECK(raw->blocks() == 0);

  kv.store(1, prefix);  // stored again from the source, the lease is good again
  REQUIRE(kv.lease(prefix));
  CHECK(kv.lease(prefix)->cached_tokens == 16);
}

TEST_CASE("backed_kv evicts bytes with its index and shrinks under memory pressure") {
  auto backing = std::make_unique<host_backing>(4 * 64, tiny.bytes_per_block());
  host_backing* raw = backing.get();
  backed_kv kv({.model = tiny}, std::move(backing));
  kv.store(1, tokens(12));
  kv.store(2, tokens(12, 100));  // needs 3 slots of 4: evicts from the first chain's tail
  CHECK(raw->blocks() == 4);
  CHECK(kv.stats().evictions == 2);
  kv.shrink_to_bytes(2 * 64);
  CHECK(raw->blocks() == 2);
  CHECK(raw->capacity_bytes() == 128);
  CHECK(kv.lease(tokens(12, 100))->cached_tokens == 8);
}

namespace {
/// A backing like the GPU store's in what backed_kv sees: it synthesises
/// bytes itself, fetches into memory of its own (no host bytes back) with a
/// time of its own, and drops blocks on its own.
class own_memory_backing final : public kv_backing {
 public:
  explicit own_memory_backing(std::size_t capacity_blocks) : inner_(capacity_blocks * tiny.bytes_per_block(), tiny.bytes_per_block()) {}
  std::size_t block_bytes() const noexcept override { return inner_.block_bytes(); }
  std::uint64_t capacity_bytes() const noexcept override { return inner_.capacity_bytes(); }
  expected<void, error> put(std::span<const std::uint64_t> k, std::span<const std::byte> b) override { return inner_.put(k, b); }
  expected<duration, error> get(std::span<const std::uint64_t> k, std::span<std::byte> out) override { return inner_.get(k, out); }
  void erase(std::span<const std::uint64_t> k) override { inner_.erase(k); }
  std::uint64_t shrink(std::uint64_t bytes) override { return inner_.shrink(bytes); }
  expected<void, error> put_synthetic(std::span<const std::uint64_t> k) override {
    synthesised.insert(synthesised.end(), k.begin(), k.end());
    return kv_backing::put_synthetic(k);
  }
  expected<duration, error> fetch(std::span<const std::uint64_t> k, std::vector<std::byte>& staging) override {
    staging.clear();
    std::vector<std::byte> device(k.size() * block_bytes());  // "device memory"
    auto r = inner_.get(k, device);
    if (!r) return r;
    fetched = std::move(device);
    return duration(std::chrono::microseconds(42));
  }
  std::vector<std::uint64_t> take_dropped() override { return std::exchange(dropped, {}); }
  /// Removes a block as the store's own memory pressure would.
  void drop_on_its_own(std::uint64_t key) {
    inner_.erase(std::span(&key, 1));
    dropped.push_back(key);
  }
  std::vector<std::uint64_t> synthesised, dropped;
  std::vector<std::byte> fetched;

 private:
  host_backing inner_;
};
}  // namespace

TEST_CASE("backed_kv without a source lets the backing synthesise the bytes where it keeps them") {
  auto backing = std::make_unique<own_memory_backing>(16);
  auto* raw = backing.get();
  backed_kv kv({.model = tiny}, std::move(backing));
  const auto prefix = tokens(4 * 6);
  kv.store(1, prefix);
  const auto keys = block_keys(prefix, tiny.block_tokens);
  CHECK(raw->synthesised == keys);
  kv.store(1, tokens(4 * 7));  // only the new block is synthesised
  CHECK(raw->synthesised.size() == 7);
}

TEST_CASE("backed_kv leases with the backing's own fetch and its measured time") {
  auto backing = std::make_unique<own_memory_backing>(16);
  auto* raw = backing.get();
  backed_kv kv({.model = tiny}, std::move(backing));
  const auto prefix = tokens(4 * 3);
  kv.store(1, prefix);
  const auto l = kv.lease(prefix);
  REQUIRE(l);
  CHECK(l->fetch_time == std::chrono::microseconds(42));
  CHECK(kv.last_fetch().empty());  // the bytes went to the backing's memory, not back to the host
  REQUIRE(raw->fetched.size() == 3 * 64);
  std::vector<std::byte> want(64);
  detail::synthetic_block(block_keys(prefix, tiny.block_tokens)[1], {}, want);
  CHECK(std::equal(want.begin(), want.end(), raw->fetched.begin() + 64));
}

TEST_CASE("blocks a backing drops on its own are forgotten by the index, so a lease stops at the hole") {
  auto backing = std::make_unique<own_memory_backing>(16);
  auto* raw = backing.get();
  backed_kv kv({.model = tiny}, std::move(backing));
  const auto prefix = tokens(4 * 5);
  kv.store(1, prefix);
  raw->drop_on_its_own(block_keys(prefix, tiny.block_tokens)[3]);
  const auto l = kv.lease(prefix);
  REQUIRE(l);
  CHECK(l->cached_tokens == 3 * 4);  // not a failed fetch of a missing block
  CHECK(kv.last_error().empty());
  CHECK(kv.stats().resident == 4);
  kv.store(1, prefix);  // the dropped block is stored again
  CHECK(kv.lease(prefix)->cached_tokens == 5 * 4);
}

TEST_CASE("backed_kv refuses a backing whose block size differs from the model's") {
  CHECK_THROWS_AS(backed_kv({.model = tiny}, std::make_unique<host_backing>(1024, 32)), std::invalid_argument);
}

TEST_CASE("any_kv erases every store and reports index statistics where there is an index") {
  any_kv kv = remote_gpu_kv{};
  CHECK(kv.name() == "remote_gpu_kv");
  kv.store(0, tokens(64));
  CHECK(kv.lease(tokens(64))->cached_tokens == 64);
  REQUIRE(kv.stats());
  CHECK(kv.stats()->hits == 4);
  CHECK_FALSE(any_kv{}.stats());
  CHECK(any_kv{}.name() == "no_kv");
}

TEST_CASE("kv configs round-trip through JSON") {
  std::vector<any_kv> all;
  all.emplace_back(no_kv{});
  all.emplace_back(host_kv{{.model = tiny, .capacity_bytes = 4096, .bandwidth_gbps = 50, .latency_us = 3}});
  all.emplace_back(remote_gpu_kv{});
  all.emplace_back(backed_kv({.model = tiny}, std::make_unique<host_backing>(2048, 64)));
  for (const auto& kv : all) {
    auto back = make_kv(kv.config());
    REQUIRE(back);
    CHECK(back->config() == kv.config());
  }
  CHECK(nlohmann::json(tiny) ==
        nlohmann::json::parse(R"({"layers":1,"kv_heads":1,"head_dim":4,"dtype_bytes":2,"block_tokens":4})"));
  auto remote = make_kv(nlohmann::json::parse(R"({"remote_gpu_kv": {"capacity_bytes": 1073741824}})"));
  REQUIRE(remote);
  CHECK(remote->config()["remote_gpu_kv"]["bandwidth_gbps"] == 395.0);
  CHECK(make_kv("no_kv")->name() == "no_kv");
}

TEST_CASE("make_kv rejects bad configs with messages that say what to fix") {
  auto message = [](const char* text) {
    auto t = make_kv(nlohmann::json::parse(text));
    REQUIRE_FALSE(t);
    return t.error().what();
  };
  using Catch::Matchers::Contains;
  CHECK_THAT(message(R"({"remote_kv": {}})"), Contains("/remote_kv: unknown kv kind 'remote_kv'") && Contains("remote_gpu_kv"));
  CHECK_THAT(message(R"({"host_kv": {"bandwidth_gbps": 0}})"), Contains("/host_kv/bandwidth_gbps: must be a number in [0.001, 100000], got 0"));
  CHECK_THAT(message(R"({"host_kv": {"capacity_bytes": -5}})"), Contains("/host_kv/capacity_bytes: ") && Contains("integer"));
  CHECK_THAT(message(R"({"host_kv": {"model": {"layers": 0}}})"), Contains("/host_kv/model/layers: ") && Contains("[1, 1024]"));
  CHECK_THAT(message(R"({"host_kv": {"model": {"layer": 2}}})"), Contains("/host_kv/model/layer: unknown key 'layer' (did you mean 'layers'?)"));
  CHECK_THAT(message(R"({"no_kv": {"x": 1}})"), Contains("takes no parameters"));
}

TEST_CASE("KV stores are read within physical sizes: blocks of at most 1 GiB, stores of at most 1 PiB") {
  using Catch::Matchers::Contains;
  auto message = [](const char* text) {
    auto t = make_kv(nlohmann::json::parse(text));
    REQUIRE_FALSE(t);
    return t.error().what();
  };
  CHECK_THAT(message(R"({"backed_kv": {"model": {"layers": 1024, "kv_heads": 1024, "head_dim": 1024, "block_tokens": 1024}}})"),
             Contains("over the limit of 1073741824 bytes"));
  CHECK_THAT(message(R"({"remote_gpu_kv": {"capacity_bytes": 18446744073709551615}})"), Contains("capacity_bytes"));
  CHECK_THAT(message(R"({"host_kv": {"latency_us": 1e300}})"), Contains("latency_us"));
  CHECK_THAT(message(R"({"remote_gpu_kv": {"model": {"head_dim": 2147483647}}})"), Contains("head_dim"));
}

