#pragma once
// The on-disk level of the compile cache: one file per entry,
// <dir>/<key[0:2]>/<key>.entry, holding a header (key, log, kernels, cubin
// size and a digest of all of it) and the cubin. Each file is written to a
// temporary name in the same directory and renamed, so a reader sees a whole
// entry or none.
//
// The files are not trusted on read. A cubin from the cache is loaded and run
// as the kernel its key names, so an entry counts only when every check
// passes; anything else is a miss (and the entry is recompiled and replaced):
// - the directory must belong to this process's user and be writable by
//   nobody else (checked when the cache is opened, and for each subdirectory);
// - an entry must be a regular file (not a link, a FIFO or a device) of this
//   user's, writable by nobody else, of bounded size;
// - its digest must match its key, cubin, log and kernel report, so a
//   swapped, truncated or edited file never passes for the kernel it names.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/compiler.hpp>

#include <memory>
#include <string>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

class disk_cache {
 public:
  /// Opens (creating it with mode 0700 if absent) the cache under `dir`; an
  /// error says why a directory is refused and what to do.
  static expected<disk_cache, error> open(std::string dir);

  struct loaded {
    std::shared_ptr<compiled> entry{};  ///< null: a miss
    bool rejected = false;              ///< an entry was there but failed a check
  };
  /// The entry for `key`, if one is there and passes every check.
  [[nodiscard]] loaded load(const std::string& key) const;

  /// Best effort: a cache that cannot be written only costs a later recompile.
  void store(const compiled& c) const;

  /// Entries larger than this are refused on read and not written.
  static constexpr std::size_t max_entry_bytes = std::size_t{256} << 20;

 private:
  explicit disk_cache(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
