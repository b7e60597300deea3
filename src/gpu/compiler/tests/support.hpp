#pragma once
// What the compiler's tests share.
#include <specgen/gpu/compiler.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

namespace specgen::gpu::testing {

/// Tests that need NVRTC say so and pass vacuously on machines without it.
inline bool nvrtc_ready() {
  auto v = compiler::nvrtc_version();
  if (!v) WARN("NVRTC not available, skipping: " << v.error().message);
  return v.has_value();
}

/// A fresh directory under the system's temporary directory, removed with everything in it.
struct temp_dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("specgen-compiler-test-" + std::to_string(::getpid()) + "-" +
                                std::to_string(std::random_device{}()));
  temp_dir() { std::filesystem::create_directories(path); }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;  // owns the directory
  temp_dir& operator=(const temp_dir&) = delete;
};

}  // namespace specgen::gpu::testing
