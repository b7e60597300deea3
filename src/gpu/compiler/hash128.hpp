#pragma once
// The compile cache's 128-bit key and digest hash: XXH3 over length-prefixed
// fields (specgen/detail/xxh3.hpp). The on-disk entries name their format
// version, so a change of hash is a change of version there.
#include <specgen/detail/xxh3.hpp>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

using hash128 = specgen::detail::xxh3_128;

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
