#pragma once
/// `backed_kv`: a KV policy of real bytes, a `block_index` in front of a
/// `kv_backing` (host memory, or the GPU KV store's device memory).
#include <specgen/backend.hpp>
#include <specgen/kv/backing.hpp>
#include <specgen/kv/blocks.hpp>
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace policy {

/**
 * A store of real bytes: a `block_index` decides residency, a `kv_backing`
 * holds the bytes, and `lease` performs the batched fetch (`kv_backing::fetch`:
 * into a host staging buffer, or into GPU memory for the GPU store) and
 * reports its measured time. A fetch that fails its integrity check drops the
 * blocks involved and yields no lease (the fork recomputes); blocks the
 * backing drops on its own are forgotten at the next call.
 * The backing is a resource, shared by copies: a copy has its own index over
 * the same bytes, so give each engine its own store rather than copies of one.
 *
 * @code
 *   const specgen::kv_model m{};
 *   specgen::policy::backed_kv kv({.model = m}, std::make_shared<specgen::host_backing>(1ull << 30, m.bytes_per_block()));
 * @endcode
 */
class backed_kv {
 public:
  struct params {
    kv_model model{};
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("model", s.model);
    }
    friend bool operator==(const params&, const params&) = default;
    friend void to_json(nlohmann::json& j, const params& p) { j = detail::write_fields(p); }
  };

  backed_kv(params p, std::shared_ptr<kv_backing> backing, kv_block_source source = {})
      : p_((detail::require_valid(p, "backed_kv"), p)),
        backing_(backing ? std::move(backing) : throw std::invalid_argument("backed_kv: the backing must not be null")),
        source_(std::move(source)),
        index_(capacity_blocks()) {
    if (backing_->block_bytes() != p_.model.bytes_per_block())
      throw std::invalid_argument(fmt::format("backed_kv: the backing's blocks are {} bytes, the model's {}",
                                              backing_->block_bytes(), p_.model.bytes_per_block()));
  }

  void store(int owner, std::span<const token_id> prefix) {
    forget_dropped();
    const auto keys = block_keys(prefix, p_.model.block_tokens);
    auto r = index_.insert(keys, owner);
    backing_->erase(r.evicted);
    if (r.inserted.empty()) return;
    if (!source_) {
      if (auto ok = backing_->put_synthetic(r.inserted); !ok) {
        last_error_ = ok.error().message;
        index_.erase(r.inserted);
      }
      return;
    }
    // Inserted keys are not contiguous in general; gather their bytes into one batch.
    const std::size_t bb = backing_->block_bytes();
    std::vector<std::byte> batch(r.inserted.size() * bb);
    const auto bt = static_cast<std::size_t>(p_.model.block_tokens);
    for (std::size_t i = 0; i < r.inserted.size(); ++i) {
      const auto pos = static_cast<std::size_t>(std::find(keys.begin(), keys.end(), r.inserted[i]) - keys.begin());
      source_(r.inserted[i], prefix.subspan(pos * bt, bt), std::span<std::byte>(batch).subspan(i * bb, bb));
    }
    if (auto ok = backing_->put(r.inserted, batch); !ok) {
      last_error_ = ok.error().message;
      index_.erase(r.inserted);
    }
  }

  [[nodiscard]] std::optional<kv_lease> lease(std::span<const token_id> prefix) {
    forget_dropped();
    const auto keys = block_keys(prefix, p_.model.block_tokens);
    const std::size_t n = index_.match(keys);
    if (n == 0) return std::nullopt;
    const auto leased = std::span<const std::uint64_t>(keys).first(n);
    auto took = backing_->fetch(leased, staging_);
    if (!took) {
      last_error_ = took.error().message;
      backing_->erase(index_.erase(leased));
      staging_.clear();
      return std::nullopt;
    }
    return kv_lease{.cached_tokens = n * std::uint64_t(p_.model.block_tokens), .fetch_time = *took, .handle = keys[n - 1]};
  }

  void drop(int owner) {
    forget_dropped();
    backing_->erase(index_.drop_owner(owner));
  }
  /// Memory pressure: keep at most `bytes` of blocks.
  void shrink_to_bytes(std::uint64_t bytes) {
    forget_dropped();
    backing_->shrink(bytes);
    backing_->erase(index_.shrink_to(capacity_blocks()));
  }

  [[nodiscard]] std::string name() const { return "backed_kv"; }
  [[nodiscard]] const params& get_params() const noexcept { return p_; }
  [[nodiscard]] nlohmann::json config() const {
    return {{name(), {{"model", p_.model}, {"capacity_bytes", backing_->capacity_bytes()}}}};
  }
  [[nodiscard]] block_index_stats stats() const noexcept { return index_.stats(); }
  /// The bytes of the last successful lease, in block order (empty when the
  /// backing fetches into memory other than the host's, as the GPU store does).
  [[nodiscard]] std::span<const std::byte> last_fetch() const noexcept { return staging_; }
  /// Why the last failed put or fetch failed ("" if none did).
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  [[nodiscard]] kv_backing& backing() noexcept { return *backing_; }

 private:
  [[nodiscard]] std::size_t capacity_blocks() const {
    return static_cast<std::size_t>(backing_->capacity_bytes() / backing_->block_bytes());
  }
  void forget_dropped() { index_.erase(backing_->take_dropped()); }

  params p_;
  std::shared_ptr<kv_backing> backing_;
  kv_block_source source_;
  block_index index_;
  std::vector<std::byte> staging_;
  std::string last_error_;
};

}  // namespace policy

SPECGEN_END_NAMESPACE
