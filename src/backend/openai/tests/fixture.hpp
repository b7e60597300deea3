#pragma once
// What the backend tests share: a real-time loop driven until a condition, a
// sink that records what it receives, and a backend against a fake server.
#include "fake_server.hpp"

#include <specgen/backend/openai.hpp>
#include <specgen/clock.hpp>

#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fixture {

using namespace specgen;
using namespace specgen::openai;
using testing::fake_server;
using testing::server_options;
using testing::fault;

/// Runs `loop` until `done()` holds (checked every millisecond) or `timeout_s` passes.
inline bool run_until(event_loop<steady_clock>& loop, const std::function<bool()>& done, double timeout_s = 10) {
  bool ok = false;
  const timestamp deadline = loop.now() + seconds(timeout_s);
  std::function<void()> tick = [&] {
    if (done()) {
      ok = true;
      loop.stop();
    } else if (loop.now() > deadline) {
      loop.stop();
    } else {
      loop.after(std::chrono::milliseconds(1), tick);
    }
  };
  loop.hold();
  loop.after(duration{0}, tick);
  loop.run();
  loop.release();
  return ok;
}

/// Records every chunk and end, and lets a test act on each chunk.
struct recorder final : stream_sink {
  std::vector<stream_chunk> chunks;
  std::vector<stream_end> ends;
  std::function<void(const stream_chunk&)> on_each;
  bool chunk_after_end = false;

  void on_chunk(const stream_chunk& c) override {
    for (const auto& e : ends)
      if (e.id == c.id && e.sample == c.sample) chunk_after_end = true;
    chunks.push_back(c);
    if (on_each) on_each(c);
  }
  void on_end(const stream_end& e) override { ends.push_back(e); }

  [[nodiscard]] std::string text(stream_id id, bool reasoning, int sample = 0) const {
    std::string s;
    for (const auto& c : chunks)
      if (c.id == id && c.reasoning == reasoning && c.sample == sample) s += c.text;
    return s;
  }
  [[nodiscard]] std::vector<token_id> ids(stream_id id, bool reasoning) const {
    std::vector<token_id> v;
    for (const auto& c : chunks)
      if (c.id == id && c.reasoning == reasoning) v.insert(v.end(), c.tokens.begin(), c.tokens.end());
    return v;
  }
  [[nodiscard]] std::size_t ended(stream_id id) const {
    std::size_t n = 0;
    for (const auto& e : ends) n += e.id == id;
    return n;
  }
  [[nodiscard]] const stream_end* end_of(stream_id id, int sample = 0) const {
    for (const auto& e : ends)
      if (e.id == id && e.sample == sample) return &e;
    return nullptr;
  }
};

/// A configuration for `server`, with quick retries.
inline openai_config config_for(const fake_server& server) {
  openai_config c;
  c.base_url = server.base_url();
  c.model = "test/Qwen3-8B";
  c.retry_initial_s = 0.01;
  c.retry_max_s = 0.2;
  return c;
}

inline std::unique_ptr<openai_backend> make_backend(executor& loop, const openai_config& c) {
  auto b = openai_backend::create(loop, c);
  if (!b) FAIL("create: " << b.error().message);
  return std::move(*b);
}

inline reasoning_request ask(std::string prompt = "Write a softmax kernel.") {
  reasoning_request r;
  r.system = "You write CUDA.";
  r.prompt = std::move(prompt);
  return r;
}

}  // namespace fixture
