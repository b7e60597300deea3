#pragma once
// The MPI calls of the pool and of a worker rank, made from one thread
// (MPI_THREAD_SERIALIZED): non-blocking sends whose buffers live until they
// complete, and a non-blocking receive of whatever has arrived.
#include <specgen/detail/config.hpp>

#include <specgen/mpi/pool.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace mpi {

struct message {
  int rank = -1;
  int tag = 0;
  std::string body{};
};

class link {
 public:
  link() = default;
  link(const link&) = delete;
  link& operator=(const link&) = delete;
  ~link();

  /// Starts sending `body` to `rank`; the buffer is kept until the send
  /// completes. Throws std::runtime_error when MPI refuses the send.
  void send(int rank, int tag, std::string body);
  /// Completes what it can of the sends in flight; returns how many remain.
  std::size_t progress();
  /// A message that has arrived (from any rank, any tag), or none.
  std::optional<message> poll();
  /// Stops waiting for the sends to `rank` (a lost rank may never take them):
  /// their requests are freed and their buffers kept until the link goes, as
  /// MPI may still read them.
  void abandon(int rank);
  /// Waits up to `limit` for every send in flight to complete.
  void flush(std::chrono::milliseconds limit);

 private:
  struct pending {
    int rank = -1;
    void* request = nullptr;  // MPI_Request, kept opaque here
    std::string body;
  };
  std::list<pending> sends_;
  std::vector<std::string> abandoned_;
};

/// An MPI thread's wait between looks for messages, as `polling` says; a
/// sleep ends early when `ready` turns true.
class poll_waiter {
 public:
  explicit poll_waiter(polling p) : busy_(p.busy_poll), idle_(p.idle_poll), backoff_(first()) {}
  /// Something was sent or received: look again at once.
  void active() {
    last_active_ = std::chrono::steady_clock::now();
    backoff_ = first();
  }
  /// Nothing was: wait before the next look.
  template <class Ready>
  void wait(std::mutex& m, std::condition_variable& wake, Ready ready) {
    if (idle_.count() <= 0 || std::chrono::steady_clock::now() - last_active_ < busy_) {
      std::this_thread::yield();
      return;
    }
    std::unique_lock lock(m);
    wake.wait_for(lock, backoff_, ready);
    backoff_ = std::min(backoff_ * 2, idle_);
  }

 private:
  [[nodiscard]] std::chrono::microseconds first() const { return std::min(std::chrono::microseconds(20), idle_); }
  std::chrono::microseconds busy_;
  std::chrono::microseconds idle_;
  std::chrono::microseconds backoff_;
  std::chrono::steady_clock::time_point last_active_ = std::chrono::steady_clock::now();
};

/// Set in this process once a rank is known lost (rank 0: taken for dead;
/// a worker: told so by rank 0's stop). `environment` then skips
/// MPI_Finalize, which in Open MPI 4.1 waits on every rank of the job, the
/// lost one included, and may never return.
void note_rank_lost() noexcept;
[[nodiscard]] bool rank_was_lost() noexcept;

/// Blocking receive of one message with `tag` from `rank` (before the MPI
/// thread starts). Throws std::runtime_error on an MPI error.
message receive(int rank, int tag);
/// Blocking send (before the MPI thread starts).
void send_now(int rank, int tag, const std::string& body);

}  // namespace mpi
SPECGEN_END_NAMESPACE
