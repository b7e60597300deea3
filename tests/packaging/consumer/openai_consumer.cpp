// Built when the package has the OpenAI backend (specgen::openai, present
// where specgen was built with libcurl): proves the static library carries
// libcurl into a user's link. Nothing listens on port 1, which is the check.
#include <specgen/backend/openai.hpp>

#include <fmt/format.h>

int main() {
  specgen::event_loop<specgen::steady_clock> loop;
  auto model = specgen::openai::openai_backend::create(loop, {.base_url = "http://127.0.0.1:1", .model = "m"});
  if (model) {
    fmt::print(stderr, "create succeeded without a server\n");
    return 1;
  }
  fmt::print("{}\n", model.error().message);
  return 0;
}
