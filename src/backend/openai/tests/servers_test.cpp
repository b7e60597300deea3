// Several servers behind one backend: new streams spread by load, forks stay
// on their parent's server, a server that stops leaves the rotation (its
// streams end naming it) and comes back when it answers again.
#include "fixture.hpp"

#include <specgen/engine.hpp>
#include <specgen/modes.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/sim/simulated_device.hpp>

#include <map>
#include <memory>
#include <set>

using namespace fixture;

namespace {

/// A server whose main stream reasons for `tokens` tokens at `pace` tokens/s.
server_options long_stream(int tokens, double pace) {
  server_options so{.format = testing::wire::vllm, .tokens_per_s = pace};
  so.reasoning.clear();
  for (int i = 0; i < tokens; ++i) so.reasoning.push_back(i % 10 == 9 ? "\n" : " word");
  return so;
}

openai_config config_for(const std::vector<const fake_server*>& servers) {
  openai_config c = fixture::config_for(*servers.front());
  c.base_url.clear();
  for (const auto* s : servers) c.base_urls.push_back(s->base_url());
  c.max_retries = 1;
  return c;
}

/// The backend's stream id a request carries in its request id ("specgen-...-<id>").
stream_id id_of(const testing::request_record& r) {
  return static_cast<stream_id>(std::stoull(r.rid.substr(r.rid.rfind('-') + 1)));
}

int count(const std::vector<testing::request_record>& rs, std::string_view path) {
  int n = 0;
  for (const auto& r : rs) n += r.path == path;
  return n;
}
int count(const fake_server& s, std::string_view path) { return count(s.requests(), path); }

/// Waits until `s` has received `n` requests to `path`.
bool wait_for(const fake_server& s, std::string_view path, int n) {
  return s.wait_until([&](const auto& rs) { return count(rs, path) >= n; }, 5);
}

}  // namespace

TEST_CASE("new streams go to the least loaded server, ties in configuration order, and instances() counts them") {
  fake_server a(long_stream(2000, 200)), b(long_stream(2000, 200));
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for({&a, &b}));
  REQUIRE(model->instances().size() == 2);
  CHECK(model->instances()[0].base_url == a.base_url());
  CHECK(model->server().left_out.empty());

  recorder main, forks;
  std::vector<stream_id> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(*model->start_reasoning(ask(), main));
  auto in = model->instances();
  CHECK(in[0].active == 2);
  CHECK(in[1].active == 2);
  CHECK(in[0].reasoning_streams == 2);
  CHECK(in[1].reasoning_streams == 2);
  REQUIRE(wait_for(a, "/v1/chat/completions", 2));
  REQUIRE(wait_for(b, "/v1/chat/completions", 2));
  // Alternating: the first and third on a, the second and fourth on b.
  std::vector<stream_id> on_a, on_b;
  for (const auto& r : a.requests())
    if (r.path == "/v1/chat/completions") on_a.push_back(id_of(r));
  for (const auto& r : b.requests())
    if (r.path == "/v1/chat/completions") on_b.push_back(id_of(r));
  std::sort(on_a.begin(), on_a.end());
  std::sort(on_b.begin(), on_b.end());
  CHECK(on_a == std::vector<stream_id>{ids[0], ids[2]});
  CHECK(on_b == std::vector<stream_id>{ids[1], ids[3]});

  // A three-sample fork from a stream on b makes b the busier: the next two streams go to a.
  REQUIRE(run_until(loop, [&] { return main.ids(ids[1], true).size() >= 5; }));
  auto f = model->fork({.ctx = {}, .parent = ids[1], .reasoning_prefix = main.ids(ids[1], true), .samples = 3}, forks);
  REQUIRE(f);
  in = model->instances();
  CHECK(in[1].active == 5);
  CHECK(in[1].forks == 1);
  const stream_id s5 = *model->start_reasoning(ask(), main);
  const stream_id s6 = *model->start_reasoning(ask(), main);
  in = model->instances();
  CHECK(in[0].active == 4);
  CHECK(in[0].reasoning_streams == 4);
  CHECK(in[1].reasoning_streams == 2);
  // Cancelling frees the slot: with a at 4 and b at 5, then a at 3, the next goes to a again.
  model->cancel(s5);
  CHECK(model->instances()[0].active == 3);
  const stream_id s7 = *model->start_reasoning(ask(), main);
  CHECK(model->instances()[0].reasoning_streams == 5);
  REQUIRE(a.wait_until([&](const auto& rs) {
    int n = 0;
    for (const auto& r : rs) n += r.path == "/v1/chat/completions" && (id_of(r) == s6 || id_of(r) == s7);
    return n == 2;
  }, 5));
  REQUIRE(wait_for(b, "/v1/completions", 1));
  for (stream_id id : ids) model->cancel(id);
  model->cancel(s6);
  model->cancel(s7);
  model->cancel(*f);
  REQUIRE(run_until(loop, [&] { return model->instances()[0].active == 0 && model->instances()[1].active == 0; }));
  CHECK(count(b, "/v1/completions") == 1);
  CHECK(count(a, "/v1/completions") == 0);
}

TEST_CASE("every fork goes to the server that serves its parent, and hits its prefix cache there") {
  fake_server a(long_stream(300, 2000)), b(long_stream(300, 2000));
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, config_for({&a, &b}));
  recorder main, forks;
  std::map<stream_id, stream_id> parent_of;  // fork -> parent
  std::map<stream_id, int> chunks;
  main.on_each = [&](const stream_chunk& c) {
    if (!c.reasoning) return;
    const int n = ++chunks[c.id];
    if (n != 20 && n != 60) return;  // two forks per stream
    auto f = model->fork({.ctx = {}, .parent = c.id, .reasoning_prefix = main.ids(c.id, true), .samples = 2}, forks);
    REQUIRE(f);
    parent_of[*f] = c.id;
  };
  std::vector<stream_id> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(*model->start_reasoning(ask("prompt " + std::to_string(i)), main));
  REQUIRE(run_until(loop, [&] {
    for (stream_id id : ids)
      if (main.ended(id) != 1) return false;
    for (const auto& [f, p] : parent_of)
      if (forks.ended(f) != 2) return false;
    return parent_of.size() == 12;
  }));
  int checked = 0;
  for (const fake_server* s : {&a, &b}) {
    const auto rs = s->requests();
    std::set<stream_id> parents_here;
    for (const auto& r : rs)
      if (r.path == "/v1/chat/completions") parents_here.insert(id_of(r));
    CHECK(parents_here.size() == 3);
    for (const auto& r : rs) {
      if (r.path != "/v1/completions") continue;
      INFO("fork " << id_of(r) << " of " << parent_of.at(id_of(r)));
      CHECK(parents_here.count(parent_of.at(id_of(r))) == 1);
      CHECK(r.cached_tokens > 0);
      ++checked;
    }
  }
  CHECK(checked == 12);
  const auto in = model->instances();
  CHECK(in[0].forks + in[1].forks == 12);
  CHECK(in[0].active == 0);
  CHECK(in[1].active == 0);
}

TEST_CASE("a server that stops leaves the rotation: its streams end naming it, new streams and no fork go elsewhere") {
  auto a = std::make_unique<fake_server>(long_stream(3000, 200));
  fake_server b(long_stream(3000, 200));
  const std::string a_url = a->base_url();
  event_loop<steady_clock> loop;
  openai_config c = config_for({a.get(), &b});
  c.instance_probe_s = 60;  // no return within the test
  auto model = make_backend(loop, c);
  recorder main, forks;
  std::vector<stream_id> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(*model->start_reasoning(ask(), main));  // a, b, a, b
  REQUIRE(run_until(loop, [&] {
    for (stream_id id : ids)
      if (main.ids(id, true).size() < 5) return false;
    return true;
  }));
  a.reset();  // stopped mid-stream
  REQUIRE(run_until(loop, [&] { return !model->instances()[0].in_rotation; }));
  REQUIRE(run_until(loop, [&] { return main.ended(ids[0]) == 1 && main.ended(ids[2]) == 1; }));
  for (stream_id id : {ids[0], ids[2]}) {
    const stream_end* e = main.end_of(id);
    CHECK(e->reason == finish_reason::error);
    CHECK_THAT(e->error, Catch::Contains(a_url));
  }
  CHECK(main.ended(ids[1]) == 0);
  CHECK(main.ended(ids[3]) == 0);
  const auto in = model->instances();
  CHECK_THAT(in[0].out_reason, Catch::Contains(a_url));
  CHECK(in[0].times_out == 1);
  CHECK(in[0].active == 0);
  CHECK(in[1].in_rotation);

  // A fork from a stream of the stopped server fails, naming why; none reaches b.
  auto f = model->fork({.ctx = {}, .parent = ids[0], .reasoning_prefix = main.ids(ids[0], true), .samples = 1}, forks);
  REQUIRE_FALSE(f);
  CHECK_THAT(f.error().message, Catch::Contains("out of rotation") && Catch::Contains(a_url));
  // New streams all go to b.
  const int before = count(b, "/v1/chat/completions");
  std::vector<stream_id> more;
  for (int i = 0; i < 3; ++i) more.push_back(*model->start_reasoning(ask(), main));
  CHECK(model->instances()[1].active == 5);
  CHECK(wait_for(b, "/v1/chat/completions", before + 3));
  for (stream_id id : ids) model->cancel(id);
  for (stream_id id : more) model->cancel(id);
  CHECK(count(b, "/v1/completions") == 0);
}

TEST_CASE("a server unreachable at create is left out and rejoins when it answers; with none left, streams are refused") {
  auto a = std::make_unique<fake_server>();
  auto b = std::make_unique<fake_server>();
  const int a_port = a->port();
  const std::string a_url = a->base_url(), b_url = b->base_url();
  openai_config c = config_for({a.get(), b.get()});
  c.instance_probe_s = 0.05;
  a.reset();
  event_loop<steady_clock> loop;
  auto model = make_backend(loop, c);
  REQUIRE(model->server().left_out.size() == 1);
  CHECK_THAT(model->server().left_out[0], Catch::Contains("cannot reach " + a_url));
  CHECK(model->server().base_url == b_url);
  CHECK_FALSE(model->instances()[0].in_rotation);
  recorder main;
  auto s1 = model->start_reasoning(ask(), main);
  REQUIRE(s1);
  CHECK(model->instances()[1].active == 1);

  // Back on its port: the probe finds it, and it takes the next stream.
  server_options again;
  again.port = a_port;
  a = std::make_unique<fake_server>(again);
  REQUIRE(run_until(loop, [&] { return model->instances()[0].in_rotation; }));
  CHECK(model->instances()[0].out_reason.empty());
  auto s2 = model->start_reasoning(ask(), main);
  REQUIRE(s2);
  CHECK(model->instances()[0].reasoning_streams == 1);
  REQUIRE(run_until(loop, [&] { return main.ended(*s1) == 1 && main.ended(*s2) == 1; }));
  CHECK(main.end_of(*s2)->reason == finish_reason::stop);
  CHECK(count(*a, "/v1/chat/completions") == 1);

  // Both stop: the streams that find them down take them out; then none is left.
  c.instance_probe_s = 60;
  auto model2 = make_backend(loop, c);
  CHECK(model2->server().left_out.empty());
  a.reset();
  b.reset();
  recorder second;  // model2's ids start again at 1
  auto s3 = model2->start_reasoning(ask(), second);
  auto s4 = model2->start_reasoning(ask(), second);
  REQUIRE(s3);
  REQUIRE(s4);
  REQUIRE(run_until(loop, [&] { return second.ended(*s3) == 1 && second.ended(*s4) == 1; }));
  CHECK(second.end_of(*s3)->reason == finish_reason::error);
  CHECK_THAT(second.end_of(*s3)->error, Catch::Contains("left the rotation") && Catch::Contains(a_url));
  CHECK_THAT(second.end_of(*s4)->error, Catch::Contains("left the rotation") && Catch::Contains(b_url));
  auto refused = model2->start_reasoning(ask(), second);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message, Catch::Contains("no server is in rotation") && Catch::Contains(a_url) &&
                                          Catch::Contains(b_url));
  CHECK(refused.error().retryable);
}

TEST_CASE("an engine run finishes its searches on the surviving server when the other stops mid-run") {
  server_options so = long_stream(400, 2000);
  for (const char* p : {"```cuda", "\n", "extern", " \"C\"", " __global__", " void", " k", "()", " {}", "\n", "```", "\n"})
    so.reasoning.emplace_back(p);
  for (int i = 0; i < 400; ++i) so.reasoning.push_back(" more");
  so.answer = {"```cuda\n", "extern \"C\" __global__ void k(float* x) { x[0] = 1; }\n", "```\n",
               "```plan\n", "launch k grid(1) block(1) args(x)\n", "```\n"};
  auto a = std::make_unique<fake_server>(so);
  fake_server b(so);
  const std::string a_url = a->base_url();

  auto corpus = replay::generate_corpus({.tasks = 2, .rounds = 2, .lanes = 2}, 3);
  event_loop<steady_clock> loop;
  openai_config c = config_for({a.get(), &b});
  c.instance_probe_s = 60;
  auto model = make_backend(loop, c);
  sim::simulated_device gpus(loop, corpus.costs, {.devices = 2});
  auto cfg = mode_config("specgen");
  REQUIRE(cfg);
  cfg->budget.max_rounds = 2;
  engine eng(loop, *model, gpus, std::move(*cfg));
  for (const auto& t : corpus.tasks) eng.add_search(std::make_shared<const task>(t));
  // Stop a once it has streams running.
  std::function<void()> watch = [&] {
    if (a && a->requests().size() >= 3) a.reset();
    if (a) loop.after(std::chrono::milliseconds(5), watch);
  };
  loop.after(std::chrono::milliseconds(5), watch);
  const run_result r = eng.run();

  CHECK_FALSE(a);
  REQUIRE(r.searches.size() == 2);
  int failures = 0, candidates = 0;
  for (const auto& s : r.searches) {
    INFO("end: " << s.end_reason << ", failures " << s.stream_failures << ": " << s.first_stream_error);
    CHECK(s.rounds == 2);
    failures += s.stream_failures;
    candidates += s.candidates;
    if (s.stream_failures > 0) CHECK_THAT(s.first_stream_error, Catch::Contains(a_url));
  }
  CHECK(failures > 0);      // a's streams ended with its failure
  CHECK(candidates > 0);    // and b's gave candidates
  const auto in = model->instances();
  CHECK_FALSE(in[0].in_rotation);
  CHECK(in[1].reasoning_streams > 0);
  // Every fork b got continues a prefix b holds in its cache: its parent ran there.
  for (const auto& q : b.requests())
    if (q.path == "/v1/completions") CHECK(q.cached_tokens > 0);
  CHECK(in[1].forks == static_cast<std::uint64_t>(count(b, "/v1/completions")));
}

TEST_CASE("several servers in a JSON configuration: read back, and a bad entry is named by its pointer") {
  auto c = openai::config_from_json({{"base_urls", {"http://10.0.0.1:8000", "http://10.0.0.2:8000/v1"}}, {"model", "m"}});
  REQUIRE(c);
  CHECK(c->servers() == std::vector<std::string>{"http://10.0.0.1:8000", "http://10.0.0.2:8000/v1"});
  CHECK(c->invalid().empty());
  auto back = openai::config_from_json(to_json(*c));
  REQUIRE(back);
  CHECK(*back == *c);
  // One server as before.
  auto one = openai::config_from_json({{"base_url", "http://h:1"}, {"model", "m"}});
  REQUIRE(one);
  CHECK(one->servers() == std::vector<std::string>{"http://h:1"});

  auto bad = openai::config_from_json({{"base_urls", {"http://a:1", "ftp://b"}}, {"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == "/base_urls/1");
  CHECK_THAT(bad.error().what(), Catch::StartsWith("/base_urls/1: \"ftp://b\" must start with http:// or https://"));
  bad = openai::config_from_json({{"base_urls", {"http://a:1", "http://u:s3cret@b:2?x=1"}}, {"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == "/base_urls/1");
  CHECK_THAT(bad.error().message, Catch::Contains("query") && !Catch::Contains("s3cret"));
  bad = openai::config_from_json({{"base_urls", {"http://a:1", ""}}, {"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == "/base_urls/1");
  CHECK_THAT(bad.error().message, Catch::StartsWith("is empty"));
  bad = openai::config_from_json({{"base_urls", {"http://a:1", "http://b:2", "http://a:1/v1"}}, {"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == "/base_urls/2");
  CHECK_THAT(bad.error().message, Catch::Contains("listed twice (also /base_urls/0)"));
  bad = openai::config_from_json({{"base_urls", {"http://a:1", 3}}, {"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().what(), Catch::StartsWith("/base_urls/1"));
  bad = openai::config_from_json({{"base_url", "http://a:1"}, {"base_urls", {"http://b:1"}}, {"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("not both"));
  bad = openai::config_from_json({{"base_urls", {"http://a:1"}}, {"model", "m"}, {"instance_probe_s", 0}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("instance_probe_s"));
  // In code, invalid() names the entry the same way.
  openai_config code;
  code.model = "m";
  code.base_urls = {"http://a:1", "http://"};
  CHECK_THAT(code.invalid(), Catch::StartsWith("/base_urls/1: \"http://\" has no host"));
}
