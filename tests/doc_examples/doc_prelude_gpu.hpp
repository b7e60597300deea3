/// The GPU headers' stand-ins, beside doc_prelude.hpp's (declared only; never linked).
#pragma once

#include "doc_prelude.hpp"

#include <specgen/gpu/compiler.hpp>
#include <specgen/gpu/evaluation.hpp>
#include <specgen/gpu/kv_store.hpp>

namespace specgen::doc_examples {

extern specgen::task my_task;
extern candidate my_candidate;
extern gpu::compiled compiled;
extern gpu::pool_config pc, pool_config;
extern std::shared_ptr<gpu::kv_store> store;
extern std::vector<std::uint64_t> keys;
extern std::uint64_t my_device_buffer, kv_cache_address;
extern engine_config config;
}  // namespace specgen::doc_examples
