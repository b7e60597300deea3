// specgen-kv-peer: the other process of the GPU KV tests.
//
//   specgen-kv-peer check EXPORT.json DEVICE
//       maps the exported blocks with kv_client on GPU DEVICE, fetches them
//       and compares each with the synthetic bytes of its key; prints one
//       JSON line; exit 0 when every block came back intact, 1 otherwise.
//   specgen-kv-peer alloc DEVICE BYTES
//       allocates BYTES on GPU DEVICE as an evaluation worker would; prints
//       one JSON line; exit 0 when the allocation succeeded, 3 when not.
// Exit 2: a usage or setup error (printed).
#include "gpu/loader/driver.hpp"

#include <specgen/gpu/kv_store.hpp>
#include <specgen/policy/kv.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

using namespace specgen;

namespace {

int check(const std::string& file, int device) {
  std::ifstream in(file);
  if (!in) {
    fmt::print("{}\n", nlohmann::json{{"error", "cannot read " + file}}.dump());
    return 2;
  }
  const auto e = nlohmann::json::parse(in).get<gpu::kv_export>();
  auto client = gpu::kv_client::open(device);
  if (!client) {
    fmt::print("{}\n", nlohmann::json{{"error", client.error().message}}.dump());
    return 2;
  }
  gpu::kv_client_fetch report;
  auto bytes = (*client)->fetch_to_host(e, &report);
  (*client)->unmap();  // before the store may release the lease
  if (!bytes) {
    fmt::print("{}\n", nlohmann::json{{"error", bytes.error().message}}.dump());
    return 2;
  }
  std::uint64_t mismatched = 0;
  std::vector<std::byte> want(e.block_bytes);
  for (std::size_t i = 0; i < report.blocks; ++i) {
    specgen::detail::synthetic_block(e.blocks[i].key, {}, want);
    if (!std::equal(want.begin(), want.end(), bytes->begin() + static_cast<std::ptrdiff_t>(i * e.block_bytes))) ++mismatched;
  }
  const double s = to_seconds(report.transfer.time);
  fmt::print("{}\n", nlohmann::json{{"blocks", e.blocks.size()},
                                    {"good", report.blocks},
                                    {"stale", report.stale},
                                    {"corrupt", report.corrupt},
                                    {"mismatched", mismatched},
                                    {"seconds", s},
                                    {"gbps", s > 0 ? static_cast<double>(report.transfer.bytes) / s / 1e9 : 0.0}}
                         .dump());
  return report.blocks == e.blocks.size() && mismatched == 0 ? 0 : 1;
}

int alloc(int device, std::uint64_t bytes) {
  const auto& loaded = gpu::detail::load_driver();
  if (!loaded) {
    fmt::print("{}\n", nlohmann::json{{"error", loaded.error().message}}.dump());
    return 2;
  }
  const auto& api = **loaded;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (api.cuDeviceGet(&dev, device) != CUDA_SUCCESS || api.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      api.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    fmt::print("{}\n", nlohmann::json{{"error", fmt::format("GPU {} is unavailable", device)}}.dump());
    return 2;
  }
  std::size_t free_before = 0, total = 0;
  api.cuMemGetInfo(&free_before, &total);
  CUdeviceptr p = 0;
  const CUresult r = api.cuMemAlloc(&p, bytes);
  fmt::print("{}\n", nlohmann::json{{"ok", r == CUDA_SUCCESS},
                                    {"bytes", bytes},
                                    {"free_before", free_before},
                                    {"error", r == CUDA_SUCCESS ? "" : gpu::detail::describe(api, r)}}
                         .dump());
  if (r == CUDA_SUCCESS) api.cuMemFree(p);
  api.cuDevicePrimaryCtxRelease(dev);
  return r == CUDA_SUCCESS ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "check" && argc == 4) return check(argv[2], std::atoi(argv[3]));
    if (mode == "alloc" && argc == 4) return alloc(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10));
    std::cerr << "usage: specgen-kv-peer check EXPORT.json DEVICE | alloc DEVICE BYTES\n";
    return 2;
  } catch (const std::exception& e) {
    fmt::print("{}\n", nlohmann::json{{"error", e.what()}}.dump());
    return 2;
  }
}
