// A program outside the project that uses specgen as a user would. It is built
// by the packaging tests (find_package, add_subdirectory, FetchContent) with
// -Werror, so a header that warns, or a package that does not carry its
// include paths and dependencies, fails the test. It exits non-zero, naming the
// check, when the library does not behave as documented.
#include <specgen/backend.hpp>
#include <specgen/clock.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace {

// The smallest backend a host application could write: proves the concept is
// usable from outside the project.
class null_backend {
 public:
  [[nodiscard]] specgen::backend_limits limits() const { return {}; }
  specgen::expected<specgen::stream_id, specgen::error> start_reasoning(
      const specgen::reasoning_request&, specgen::stream_sink&) {
    return ++last_;
  }
  specgen::expected<specgen::stream_id, specgen::error> fork(const specgen::fork_request&,
                                                                     specgen::stream_sink&) {
    return specgen::unexpected(specgen::error{.message = "forks are not supported"});
  }
  void cancel(specgen::stream_id) {}

 private:
  specgen::stream_id last_ = 0;
};
static_assert(specgen::backend<null_backend>);
static_assert(specgen::clock<specgen::virtual_clock>);

class null_sink final : public specgen::stream_sink {
 public:
  void on_chunk(const specgen::stream_chunk&) override {}
  void on_end(const specgen::stream_end&) override {}
};

int failures = 0;

void expect(bool ok, std::string_view what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: FAILED: %.*s\n", static_cast<int>(what.size()), what.data());
    ++failures;
  }
}

}  // namespace

int main() {
  specgen::event_loop<specgen::virtual_clock> loop;
  int fired = 0;
  loop.after(specgen::seconds(2.5), [&] {
    ++fired;
    loop.stop();
  });
  loop.after(specgen::seconds(9), [&] { ++fired; });  // after stop(): must not run
  loop.run();
  expect(fired == 1, "stop() ends the run after the callback in progress");
  expect(loop.now() == specgen::seconds(2.5), "virtual time jumps to the timer at 2.5 s");

  null_backend backend;
  null_sink sink;
  // Fields are assigned rather than designated: g++ < 14 warns under -Wextra
  // (-Wmissing-field-initializers) about designated initialisers that omit members.
  specgen::reasoning_request request;
  request.ctx.task = "softmax";
  request.prompt = "write a softmax kernel";
  const auto started = backend.start_reasoning(request, sink);
  expect(started.has_value() && *started == 1, "expected holds the value it was given");
  specgen::fork_request fork;
  fork.parent = started.value_or(0);
  fork.samples = 2;
  const auto forked = backend.fork(fork, sink);
  expect(!forked && forked.error().message == "forks are not supported",
         "expected holds the error it was given");

  expect(specgen::parse_verdict(specgen::to_string(specgen::verdict_kind::timeout)) ==
             specgen::verdict_kind::timeout,
         "verdict names round-trip");

  // fmt::format is compiled into libfmt: this also proves the link dependency propagates.
  const std::string version = fmt::format("{}.{}.{}", SPECGEN_VERSION_MAJOR, SPECGEN_VERSION_MINOR,
                                          SPECGEN_VERSION_PATCH);
#ifdef SPECGEN_CONSUMER_EXPECTED_VERSION
  expect(version == SPECGEN_CONSUMER_EXPECTED_VERSION,
         "the headers' version matches the version of the CMake package");
#endif

  if (failures == 0) std::printf("consumer: ok (specgen %s)\n", version.c_str());
  return failures == 0 ? 0 : 1;
}
