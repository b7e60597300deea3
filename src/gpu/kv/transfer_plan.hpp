#pragma once
// The GPU KV store's transfer decisions, without CUDA: where each requested
// block comes from (grouped by the tier that holds it), the route each source
// GPU takes to the destination, how many blocks go through the staging buffers
// at a time, and which blocks of a chunk one copy can carry. The store
// (store.cpp) issues the copies; tests check the decisions here.
#include "layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::kv_detail {

/// One block of a transfer: its position in the destination (in blocks) and
/// the slot it is read from.
struct transfer_item {
  std::size_t index = 0;
  slot_ref at{};
  friend bool operator==(const transfer_item&, const transfer_item&) = default;
};

/// The blocks of a transfer by the tier that holds them, each tier's in the
/// order they were asked for.
struct transfer_sources {
  std::map<int, std::vector<transfer_item>> by_tier;
  std::optional<std::uint64_t> missing;  ///< the first key not stored (`by_tier` is then incomplete)
};

inline transfer_sources group_by_tier(const layout& blocks, std::span<const std::uint64_t> keys) {
  transfer_sources out;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto* b = blocks.find(keys[i]);
    if (!b) {
      out.missing = keys[i];
      return out;
    }
    out.by_tier[b->at.tier].push_back({i, b->at});
  }
  return out;
}

/// How a source GPU's blocks reach a destination on another GPU or the host.
/// (Blocks already on the destination GPU, or in pinned host memory, need
/// none: the destination gathers them itself.)
enum class transfer_route {
  to_host,   ///< staged, then copied down to host memory
  peer,      ///< staged, then copied GPU to GPU
  via_host,  ///< staged, bounced through pinned host memory (no peer access)
};

inline transfer_route choose_route(bool to_host, bool peer_access) {
  return to_host ? transfer_route::to_host : peer_access ? transfer_route::peer : transfer_route::via_host;
}

/// Blocks per chunk through a staging buffer for a source of `items` blocks:
/// `chunk_blocks` (0: no limit), never more than there are.
inline std::size_t chunk_size(std::uint64_t chunk_blocks, std::size_t items) {
  return chunk_blocks ? static_cast<std::size_t>(std::min<std::uint64_t>(chunk_blocks, items)) : items;
}

/// One copy out of a staging buffer: `len` bytes from `src_off` in the buffer
/// to `dst_off` in the destination.
struct copy_run {
  std::uint64_t dst_off = 0, src_off = 0, len = 0;
  friend bool operator==(const copy_run&, const copy_run&) = default;
};

/// The copies that carry one chunk, staged in order: a run of blocks
/// consecutive in the destination is one copy (a chain stored in one place
/// moves in one copy per chunk).
inline std::vector<copy_run> chunk_runs(std::span<const transfer_item> chunk, std::uint64_t block_bytes) {
  std::vector<copy_run> runs;
  for (std::size_t j = 0; j < chunk.size();) {
    std::size_t e = j + 1;
    while (e < chunk.size() && chunk[e].index == chunk[e - 1].index + 1) ++e;
    runs.push_back({std::uint64_t(chunk[j].index) * block_bytes, std::uint64_t(j) * block_bytes,
                    std::uint64_t(e - j) * block_bytes});
    j = e;
  }
  return runs;
}

}  // namespace gpu::kv_detail
SPECGEN_END_NAMESPACE
