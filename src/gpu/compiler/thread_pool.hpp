#pragma once
// A fixed pool for compiles. Jobs still queued at destruction are abandoned
// (their `abandon` runs instead), so every caller hears back exactly once.
#include <specgen/detail/config.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

class thread_pool {
 public:
  struct job {
    std::function<void()> run;
    std::function<void()> abandon;
  };

  explicit thread_pool(unsigned threads) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    workers_.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  thread_pool(const thread_pool&) = delete;  // workers capture `this`
  thread_pool& operator=(const thread_pool&) = delete;

  ~thread_pool() {
    std::deque<job> left;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      left.swap(queue_);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    for (auto& j : left) j.abandon();
  }

  void submit(job j) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(j));
    }
    cv_.notify_one();
  }

 private:
  void work() {
    for (;;) {
      job j;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        j = std::move(queue_.front());
        queue_.pop_front();
      }
      j.run();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
