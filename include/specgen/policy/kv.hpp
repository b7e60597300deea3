#pragma once
/// KV storage policies: keep the reasoning prefix's KV cache where forks can
/// fetch it instead of recomputing it.
///
/// At a trigger the engine calls `store(owner, prefix)`; for each fork it asks
/// `lease(prefix)` for what is cached and how long bringing it to the server
/// takes; when a search or round is over it calls `drop(owner)`. The prefix is
/// the token ids the KV covers; pass the prompt ids followed by the reasoning
/// ids, so that equal reasoning under different prompts never shares blocks.
///
/// Blocks are identified as vLLM does: a hash chain over full blocks of
/// `block_tokens` tokens, so equal prefixes share keys and a partial last block
/// is never cached.
///
/// @code
///   specgen::policy::remote_gpu_kv kv{{.capacity_bytes = 32ull << 30}};
///   const int search = 0;
///   std::vector<specgen::token_id> prefix(4096, 1);  // prompt ids, then reasoning ids
///   specgen::fork_request fork;
///   kv.store(search, prefix);                      // at the trigger
///   if (auto l = kv.lease(prefix))                 // for the fork
///     fork.kv = *l;                                // l->fetch_time: 10 us + bytes / 395 GB/s
///   kv.drop(search);                               // search done
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/kv/backed_kv.hpp>
#include <specgen/kv/backing.hpp>
#include <specgen/kv/blocks.hpp>
#include <specgen/policy/family.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

SPECGEN_BEGIN_NAMESPACE

namespace policy {

/// A KV storage policy, as the engine calls it.
template <class S>
concept kv_policy = requires(S& s, const S& cs, int owner, std::span<const token_id> prefix) {
  { s.store(owner, prefix) } -> std::same_as<void>;                // at a trigger: keep this prefix's blocks
  { s.lease(prefix) } -> std::same_as<std::optional<kv_lease>>;    // for a fork: what is cached and the fetch time
  { s.drop(owner) } -> std::same_as<void>;                         // search done / round over
  { cs.name() } -> std::convertible_to<std::string>;
};

/// No KV storage: forks recompute the prefix on the server.
struct no_kv {
  void store(int, std::span<const token_id>) {}
  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id>) { return std::nullopt; }
  void drop(int) {}
  [[nodiscard]] std::string name() const { return "no_kv"; }
  template <class Self, class F>
  static void fields(Self&, F&&) {}  // nothing to configure
};

}  // namespace policy

namespace detail {

/// The largest store: 1 PiB, beyond any machine's memory.
inline constexpr std::uint64_t max_capacity_bytes = 1ull << 50;

/// Parameters of a store whose fetch time is modelled as one batched transfer.
template <class Tier>
struct tier_params {
  kv_model model{};
  std::uint64_t capacity_bytes = Tier::capacity_bytes;
  double bandwidth_gbps = Tier::bandwidth_gbps;  ///< GB/s = 1e9 bytes/s, for one large batched transfer
  double latency_us = Tier::latency_us;          ///< fixed cost per transfer
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("model", s.model);
    f("capacity_bytes", s.capacity_bytes, detail::in<std::uint64_t>(0, max_capacity_bytes));
    f("bandwidth_gbps", s.bandwidth_gbps, detail::in(1e-3, 1e5));
    f("latency_us", s.latency_us, detail::in(0.0, 1e6));
  }
  /// latency + bytes / bandwidth: the blocks travel as one batched copy.
  [[nodiscard]] duration fetch_time(std::uint64_t bytes) const {
    return seconds(latency_us * 1e-6 + static_cast<double>(bytes) / (bandwidth_gbps * 1e9));
  }
  friend bool operator==(const tier_params&, const tier_params&) = default;
};

/// Pinned host memory over PCIe 5.0 x16. 55 GB/s and 5 us were measured on an
/// H200 host (torch 2.11, pinned cudaMemcpyAsync timed with CUDA events,
/// 2026-11-30): 55.5 GB/s for 64 MiB-4 GiB copies, 80 us for a 4 MiB copy,
/// which leaves about 5 us of fixed cost per transfer (docs/policies.md has the
/// numbers). On PCIe 4.0 hosts (not measured here) set `bandwidth_gbps` lower.
/// 64 GiB of pinned memory is this project's choice.
struct host_tier {
  static constexpr std::string_view name = "host_kv";
  static constexpr std::uint64_t capacity_bytes = 64ull << 30;
  static constexpr double bandwidth_gbps = 55;
  static constexpr double latency_us = 5;
};

/// Spare memory of the validation/profiling GPUs. 395 GB/s: GPU-to-GPU copies
/// on an H200 pair for large transfers (the SpecGen paper; small per-block copies reach
/// only 1-11 GB/s, hence the one batched transfer). The paper does not give
/// the budget: 32 GiB per store (an H200 has 141 GB and evaluating kernels
/// uses little of it) and 10 us per transfer are this project's choices.
struct remote_gpu_tier {
  static constexpr std::string_view name = "remote_gpu_kv";
  static constexpr std::uint64_t capacity_bytes = 32ull << 30;
  static constexpr double bandwidth_gbps = 395;
  static constexpr double latency_us = 10;
};

/// A store that keeps only the index and models the fetch time of its tier.
template <class Tier>
class modelled_kv {
 public:
  using params = tier_params<Tier>;

  modelled_kv() : modelled_kv(params{}) {}
  explicit modelled_kv(params p)
      : p_((require_valid(p, Tier::name), p)), index_(static_cast<std::size_t>(p_.capacity_bytes / p_.model.bytes_per_block())) {}

  void store(int owner, std::span<const token_id> prefix) {
    index_.insert(block_keys(prefix, p_.model.block_tokens), owner);
  }
  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id> prefix) {
    const auto keys = block_keys(prefix, p_.model.block_tokens);
    const std::size_t n = index_.match(keys);
    if (n == 0) return std::nullopt;
    return kv_lease{.cached_tokens = n * std::uint64_t(p_.model.block_tokens),
                    .fetch_time = p_.fetch_time(n * p_.model.bytes_per_block()),
                    .handle = keys[n - 1]};
  }
  void drop(int owner) { index_.drop_owner(owner); }
  /// Memory pressure: keep at most `bytes` of blocks.
  void shrink_to_bytes(std::uint64_t bytes) {
    index_.shrink_to(static_cast<std::size_t>(bytes / p_.model.bytes_per_block()));
  }

  [[nodiscard]] std::string name() const { return std::string(Tier::name); }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }
  [[nodiscard]] block_index_stats stats() const noexcept { return index_.stats(); }
  [[nodiscard]] const block_index& index() const noexcept { return index_; }

 private:
  params p_;
  block_index index_;
};

}  // namespace detail

namespace policy {

/// KV blocks in pinned host memory, fetched over PCIe (see detail::host_tier for the defaults).
using host_kv = detail::modelled_kv<detail::host_tier>;
/// KV blocks in the spare memory of evaluation GPUs, fetched over NVLink in one batch (the paper's remote KV).
using remote_gpu_kv = detail::modelled_kv<detail::remote_gpu_tier>;

static_assert(kv_policy<no_kv>);
static_assert(kv_policy<host_kv>);
static_assert(kv_policy<remote_gpu_kv>);
static_assert(kv_policy<backed_kv>);

/// How `any_kv` forwards the family's calls.
struct kv_interface {
  struct calls {
    virtual ~calls() = default;
    virtual void store(int, std::span<const token_id>) = 0;
    virtual std::optional<kv_lease> lease(std::span<const token_id>) = 0;
    virtual void drop(int) = 0;
    virtual std::optional<block_index_stats> stats() const = 0;
  };
  template <class Base, class T>
  struct impl : detail::policy_holder<Base, T> {
    using detail::policy_holder<Base, T>::policy_holder;
    void store(int o, std::span<const token_id> p) override { this->value.store(o, p); }
    std::optional<kv_lease> lease(std::span<const token_id> p) override { return this->value.lease(p); }
    void drop(int o) override { this->value.drop(o); }
    std::optional<block_index_stats> stats() const override {
      if constexpr (requires { { this->value.stats() } -> std::convertible_to<block_index_stats>; }) return this->value.stats();
      else return std::nullopt;
    }
  };
};

/**
 * Any KV policy, chosen at run time. A copy is an independent store with the
 * same configuration and contents; a `backed_kv`'s backing (host or GPU
 * memory) is a resource its copies share.
 *
 * @code
 *   specgen::policy::any_kv kv = specgen::policy::remote_gpu_kv{};
 *   kv.store(0, std::vector<specgen::token_id>(64, 1));
 *   if (auto s = kv.stats()) log("{} blocks resident", s->resident);
 * @endcode
 */
class any_kv : public basic_any<kv_interface, ownership::cloned> {
 public:
  any_kv() : any_kv(no_kv{}) {}
  template <kv_policy S>
    requires(!std::derived_from<std::remove_cvref_t<S>, any_kv>)
  any_kv(S s) : basic_any(std::move(s)) {}  // NOLINT implicit by design

  void store(int owner, std::span<const token_id> prefix) { self().store(owner, prefix); }
  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id> prefix) { return self().lease(prefix); }
  void drop(int owner) { self().drop(owner); }
  /// Index statistics, for stores that keep an index.
  [[nodiscard]] std::optional<block_index_stats> stats() const { return self().stats(); }
};

static_assert(kv_policy<any_kv>);

}  // namespace policy

namespace detail {
/// backed_kv's JSON form: the model and the host backing's capacity.
struct backed_kv_config {
  kv_model model{};
  std::uint64_t capacity_bytes = 1ull << 30;
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("model", s.model);
    // Real bytes in host memory: at most 1 TiB.
    f("capacity_bytes", s.capacity_bytes, in<std::uint64_t>(0, 1ull << 40));
  }
};

/// A `backed_kv` over a new host backing, from its JSON form.
inline expected<policy::any_kv, error> build_backed_kv(const nlohmann::json& body, std::string_view pointer, int) {
  return read_fields<backed_kv_config>(body, pointer).transform([](const backed_kv_config& c) {
    return policy::any_kv(policy::backed_kv({.model = c.model},
                                            std::make_shared<host_backing>(c.capacity_bytes, c.model.bytes_per_block())));
  });
}
}  // namespace detail

namespace policy {

/// The KV family: its name in configs and its kinds.
struct kv_family {
  using any = any_kv;
  static constexpr std::string_view name = "kv";
  static constexpr std::array<builder<any_kv>, 4> kinds{{from_params<any_kv, no_kv>("no_kv"),
                                                         from_params<any_kv, host_kv>("host_kv"),
                                                         from_params<any_kv, remote_gpu_kv>("remote_gpu_kv"),
                                                         {"backed_kv", &detail::build_backed_kv}}};
};

/**
 * Builds a KV policy from JSON: `"no_kv"`, `{"host_kv": {...}}`,
 * `{"remote_gpu_kv": {"capacity_bytes": 34359738368, "bandwidth_gbps": 395}}`,
 * or `{"backed_kv": {"model": {...}, "capacity_bytes": N}}` (bytes kept in a
 * host_backing, synthesised from the keys).
 */
inline expected<any_kv, error> make_kv(const nlohmann::json& j) { return make<kv_family>(j); }

}  // namespace policy

SPECGEN_END_NAMESPACE
