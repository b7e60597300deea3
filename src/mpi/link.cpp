#include "mpi/link.hpp"

#include <mpi.h>

#include <fmt/format.h>

#include <atomic>
#include <stdexcept>
#include <thread>

SPECGEN_BEGIN_NAMESPACE
namespace mpi {

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(fmt::format("{}: {}", what, std::string(text, static_cast<std::size_t>(length))));
}
MPI_Request* req(void* p) { return static_cast<MPI_Request*>(p); }
std::atomic<bool> lost_flag{false};
}  // namespace

void note_rank_lost() noexcept { lost_flag = true; }
bool rank_was_lost() noexcept { return lost_flag; }

link::~link() {
  for (auto& p : sends_) {
    if (*req(p.request) != MPI_REQUEST_NULL) MPI_Request_free(req(p.request));
    delete req(p.request);
  }
}

void link::send(int rank, int tag, std::string body) {
  sends_.push_back({rank, new MPI_Request(MPI_REQUEST_NULL), std::move(body)});
  pending& p = sends_.back();
  check(MPI_Isend(p.body.data(), static_cast<int>(p.body.size()), MPI_CHAR, rank, tag, MPI_COMM_WORLD, req(p.request)),
        "MPI_Isend");
}

std::size_t link::progress() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    check(MPI_Test(req(it->request), &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) {
      delete req(it->request);
      it = sends_.erase(it);
    } else {
      ++it;
    }
  }
  return sends_.size();
}

std::optional<message> link::poll() {
  int flag = 0;
  MPI_Status status;
  check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status), "MPI_Iprobe");
  if (!flag) return std::nullopt;
  int count = 0;
  check(MPI_Get_count(&status, MPI_CHAR, &count), "MPI_Get_count");
  message m{status.MPI_SOURCE, status.MPI_TAG, std::string(static_cast<std::size_t>(count), '\0')};
  check(MPI_Recv(m.body.data(), count, MPI_CHAR, m.rank, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  return m;
}

void link::abandon(int rank) {
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (it->rank != rank) {
      ++it;
      continue;
    }
    if (*req(it->request) != MPI_REQUEST_NULL) MPI_Request_free(req(it->request));
    delete req(it->request);
    abandoned_.push_back(std::move(it->body));
    it = sends_.erase(it);
  }
}

void link::flush(std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (progress() > 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

message receive(int rank, int tag) {
  MPI_Status status;
  check(MPI_Probe(rank, tag, MPI_COMM_WORLD, &status), "MPI_Probe");
  int count = 0;
  check(MPI_Get_count(&status, MPI_CHAR, &count), "MPI_Get_count");
  message m{status.MPI_SOURCE, status.MPI_TAG, std::string(static_cast<std::size_t>(count), '\0')};
  check(MPI_Recv(m.body.data(), count, MPI_CHAR, m.rank, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  return m;
}

void send_now(int rank, int tag, const std::string& body) {
  check(MPI_Send(body.data(), static_cast<int>(body.size()), MPI_CHAR, rank, tag, MPI_COMM_WORLD), "MPI_Send");
}

}  // namespace mpi
SPECGEN_END_NAMESPACE
