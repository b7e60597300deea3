#pragma once
/// Clocks and the event loop that every engine, backend and evaluator shares.
///
/// Engine code never reads a system clock: it asks the loop for `now()`. With
/// `virtual_clock` the loop is a discrete-event simulation (time jumps to the
/// next timer), so a 1,000-round search runs in seconds and is bit-for-bit
/// reproducible; with `steady_clock` the same code runs a real search.
///
/// @code
///   specgen::event_loop<specgen::virtual_clock> loop;
///   loop.after(specgen::seconds(2.5), [&] { loop.stop(); });
///   loop.run();            // returns at once; loop.now() == 2.5 s
/// @endcode
#include <specgen/detail/config.hpp>

#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// Time since the start of a run. Integral nanoseconds keep virtual time exact.
using duration = std::chrono::nanoseconds;
using timestamp = std::chrono::nanoseconds;

/// The longest duration `seconds` converts: 10^9 s (31.7 years), so that a
/// timestamp plus such a duration still fits in 64-bit nanoseconds (292 years).
inline constexpr double max_duration_seconds = 1e9;

namespace detail {
[[noreturn]] inline void duration_out_of_range(double s) {
  throw std::out_of_range("specgen::seconds(" + std::to_string(s) + "): a duration must be finite and within +-" +
                          std::to_string(max_duration_seconds) +
                          " s; check the input's range where it is read (see specgen/detail/limits.hpp)");
}
}  // namespace detail

/// Seconds as a duration, rounded to the nanosecond. A NaN, an infinity or a
/// value beyond `max_duration_seconds` would overflow the integral
/// nanoseconds (undefined behaviour; in practice a deadline at t = 0), so it
/// throws `std::out_of_range`: inputs are range-checked where they are read,
/// and an unchecked one reaching here is a programming error.
constexpr duration seconds(double s) {
  if (!(s >= -max_duration_seconds && s <= max_duration_seconds)) detail::duration_out_of_range(s);
  return duration(static_cast<std::int64_t>(s * 1e9 + (s >= 0 ? 0.5 : -0.5)));
}
constexpr double to_seconds(duration d) noexcept { return static_cast<double>(d.count()) * 1e-9; }

/// A clock the loop can drive. `is_virtual` clocks are advanced by the loop.
template <class C>
concept clock = requires(C& c, const C& cc, timestamp t) {
  { C::is_virtual } -> std::convertible_to<bool>;
  { cc.now() } -> std::same_as<timestamp>;
  { c.advance_to(t) } -> std::same_as<void>;
};

/// Simulated time: advanced only by the event loop, never by the wall.
class virtual_clock {
 public:
  static constexpr bool is_virtual = true;
  [[nodiscard]] timestamp now() const noexcept { return t_; }
  void advance_to(timestamp t) noexcept {
    if (t > t_) t_ = t;
  }

 private:
  timestamp t_{0};
};

/// Wall time from `std::chrono::steady_clock`, zero at construction.
class steady_clock {
 public:
  static constexpr bool is_virtual = false;
  [[nodiscard]] timestamp now() const noexcept {
    return std::chrono::duration_cast<duration>(std::chrono::steady_clock::now() - start_);
  }
  void advance_to(timestamp) noexcept {}  // real time advances by itself

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

using timer_id = std::uint64_t;

/// What components see of the loop: time, timers and a thread-safe post.
/// Callbacks always run on the loop's thread, one at a time.
class executor {
 public:
  virtual ~executor() = default;
  [[nodiscard]] virtual timestamp now() const noexcept = 0;
  /// Run `fn` at `when` (or at once if `when` has passed). Returns an id for `cancel`.
  virtual timer_id at(timestamp when, std::function<void()> fn) = 0;
  timer_id after(duration d, std::function<void()> fn) { return at(now() + d, std::move(fn)); }
  /// Cancel a timer that has not run yet; false if it ran or never existed.
  virtual bool cancel(timer_id id) noexcept = 0;
  /// Queue `fn` to run on the loop's thread as soon as possible. Thread-safe.
  virtual void post(std::function<void()> fn) = 0;
  /// True when time is simulated (no thread may post into a virtual loop).
  [[nodiscard]] virtual bool is_virtual() const noexcept = 0;
  /// Keep a real-time loop running while outside threads may still post (a
  /// job on a worker thread whose completion will be posted); every `hold`
  /// is paired with one `release`. Call both on the loop's thread. The
  /// default does nothing (a loop that never idles out).
  virtual void hold() noexcept {}
  virtual void release() noexcept {}
};

/// The single-threaded event loop. Timers at equal times run in the order
/// they were scheduled, so a virtual run is deterministic.
template <clock Clock>
class event_loop final : public executor {
 public:
  event_loop() = default;
  event_loop(const event_loop&) = delete;  // timers hold callbacks that capture `this`
  event_loop& operator=(const event_loop&) = delete;

  [[nodiscard]] timestamp now() const noexcept override {
    if constexpr (Clock::is_virtual) return clock_.now();
    else return clock_.now();
  }

  timer_id at(timestamp when, std::function<void()> fn) override {
    const timer_id id = ++next_id_;
    timers_.emplace(key{when, id}, std::move(fn));
    index_.emplace(id, when);
    if constexpr (!Clock::is_virtual) cv_.notify_one();
    return id;
  }

  bool cancel(timer_id id) noexcept override {
    auto it = index_.find(id);
    if (it == index_.end()) return false;
    timers_.erase(key{it->second, id});
    index_.erase(it);
    return true;
  }

  void post(std::function<void()> fn) override {
    {
      std::lock_guard lock(mutex_);
      posted_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

  [[nodiscard]] bool is_virtual() const noexcept override { return Clock::is_virtual; }

  /// Stop `run()` after the callback in progress.
  void stop() noexcept {
    stopped_ = true;
    cv_.notify_one();
  }

  /// Keep a real-time loop alive while outside threads may still post.
  /// Loop thread only (or before `run`).
  void hold() noexcept override { ++holds_; }
  void release() noexcept override {
    --holds_;
    cv_.notify_one();
  }

  /// Run until `stop()`, or until nothing is left to do (no timers, no posts,
  /// no holds). Returns the number of callbacks run.
  std::uint64_t run() {
    stopped_ = false;
    std::uint64_t ran = 0;
    while (!stopped_) {
      if (drain_posted(ran)) continue;
      if (timers_.empty()) {
        if constexpr (Clock::is_virtual) break;
        std::unique_lock lock(mutex_);
        if (holds_ == 0 && posted_.empty()) break;
        cv_.wait(lock, [&] { return stopped_ || !posted_.empty() || holds_ == 0 || !timers_.empty(); });
        continue;
      }
      auto first = timers_.begin();
      const timestamp when = first->first.when;
      if constexpr (Clock::is_virtual) {
        clock_.advance_to(when);
      } else {
        const timestamp t = clock_.now();
        if (when > t) {
          std::unique_lock lock(mutex_);
          cv_.wait_for(lock, when - t, [&] { return stopped_ || !posted_.empty(); });
          continue;
        }
      }
      auto fn = std::move(first->second);
      index_.erase(first->first.id);
      timers_.erase(first);
      fn();
      ++ran;
    }
    events_ += ran;
    return ran;
  }

  /// Callbacks run over the loop's lifetime (for the engine-cost benchmark).
  [[nodiscard]] std::uint64_t events() const noexcept { return events_; }
  [[nodiscard]] std::size_t pending_timers() const noexcept { return timers_.size(); }

 private:
  struct key {
    timestamp when;
    timer_id id;
    friend bool operator<(const key& a, const key& b) noexcept {
      return a.when != b.when ? a.when < b.when : a.id < b.id;
    }
  };

  bool drain_posted(std::uint64_t& ran) {
    std::vector<std::function<void()>> batch;
    {
      std::lock_guard lock(mutex_);
      if (posted_.empty()) return false;
      batch.swap(posted_);
    }
    for (auto& fn : batch) {
      fn();
      ++ran;
    }
    return true;
  }

  Clock clock_{};
  std::map<key, std::function<void()>> timers_;
  std::map<timer_id, timestamp> index_;
  timer_id next_id_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> posted_;
  std::atomic<bool> stopped_ = false;
  std::atomic<int> holds_ = 0;
  std::uint64_t events_ = 0;
};

SPECGEN_END_NAMESPACE
