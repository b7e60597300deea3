// The backend's configuration: presets, checks and JSON, with the messages a
// user sees.
#include "config.hpp"
#include "redact.hpp"

#include <specgen/backend/openai.hpp>

#include <catch2/catch.hpp>

using namespace specgen;
using namespace specgen::openai;
using json = nlohmann::json;

namespace {

openai_config valid() { return {.base_url = "http://127.0.0.1:8000", .model = "Qwen/Qwen3-32B"}; }

}  // namespace

TEST_CASE("a configuration names what is wrong with it") {
  CHECK(valid().invalid().empty());
  auto check = [](openai_config c, const char* want) {
    INFO(c.invalid());
    CHECK_THAT(c.invalid(), Catch::Contains(want));
  };
  openai_config c = valid();
  c.base_url = "";
  check(c, "base_url is empty");
  c.base_url = "127.0.0.1:8000";
  check(c, "must start with http:// or https://");
  c.base_url = "http://";
  check(c, "has no host");
  c = valid();
  c.model = "";
  check(c, "model is empty");
  c = valid();
  c.server = "tgi";
  check(c, "server \"tgi\" is not one of");
  c.probe = false;
  c.server = "auto";
  check(c, "set probe, or name the server");
  c = valid();
  c.fork_prompt = "ids";
  check(c, "fork_prompt \"ids\"");
  c = valid();
  c.idle_timeout_s = 0;
  check(c, "idle_timeout_s must be > 0");
  c = valid();
  c.response_timeout_s = -1;
  check(c, "response_timeout_s");
  c = valid();
  c.max_event_bytes = 10;
  check(c, "max_event_bytes must be >= 1024");
  c = valid();
  c.max_response_bytes = 0;
  check(c, "max_response_bytes must be >= 1024");
  c = valid();
  c.max_stream_bytes = 1;
  check(c, "max_stream_bytes must be >= 1024");
  c = valid();
  c.base_url = "http://127.0.0.1:8000/?token=abc";
  check(c, "has a query or a fragment");
  c = valid();
  c.max_streams = 0;
  check(c, "max_streams must be >= 1");
  c = valid();
  c.retry_max_s = 0.1;
  check(c, "retry_initial_s <= retry_max_s");
  c = valid();
  c.fork_tail_tokens = -1;
  check(c, "fork_tail_tokens must be >= 0");
  c = valid();
  c.abort_path = "abort";
  check(c, "must start with /");
  c = valid();
  c.preset = "llama";
  check(c, "unknown preset \"llama\" (known: auto, deepseek-r1, deepseek-v3, qwen3, glm-4.5, generic)");
  c = valid();
  c.family = {{"answer_cue", 3}};
  check(c, "/family/answer_cue: must be a string");
  c.family = {{"think_close", ""}};
  check(c, "think_close is empty");
  c.family = {{"cue", "x"}};
  check(c, "/family/cue: unknown key 'cue'");
}

TEST_CASE("preset auto follows the served model's name") {
  CHECK(preset_for_model("Qwen/Qwen3-235B-A22B").name == "qwen3");
  CHECK(preset_for_model("deepseek-ai/DeepSeek-R1-0528").name == "deepseek-r1");
  CHECK(preset_for_model("deepseek-ai/DeepSeek-V3.1").name == "deepseek-v3");
  CHECK(preset_for_model("zai-org/GLM-4.5-Air").name == "glm-4.5");
  CHECK(preset_for_model("zai-org/GLM-5.1").name == "glm-4.5");
  CHECK(preset_for_model("meta-llama/Llama-3.3-70B").name == "generic");
  for (const auto& p : builtin_presets()) CHECK(p.invalid().empty());
}

TEST_CASE("family overrides apply on top of the named preset") {
  openai_config c = valid();
  c.preset = "glm-4.5";
  c.family = {{"answer_cue", "\n"}, {"reasoning_options", {{"chat_template_kwargs", {{"enable_thinking", false}}}}}};
  auto f = resolve_family(c);
  REQUIRE(f);
  CHECK(f->name == "glm-4.5");
  CHECK(f->answer_cue == "\n");
  CHECK(f->think_open == "<think>");
  CHECK(f->reasoning_options["chat_template_kwargs"]["enable_thinking"] == false);
}

TEST_CASE("a configuration reads back from its JSON, and bad JSON says where") {
  openai_config c = valid();
  c.server = "sglang";
  c.family = {{"answer_cue", "cue"}};
  c.max_streams = 8;
  auto back = config_from_json(to_json(c));
  REQUIRE(back);
  CHECK(*back == c);

  auto bad = config_from_json({{"base_url", "http://h"}, {"model", "m"}, {"max_stream", 3}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().where == "/max_stream");
  CHECK_THAT(bad.error().message, Catch::StartsWith("unknown key 'max_stream' (did you mean 'max_streams'?)"));
  bad = config_from_json({{"base_url", "http://h"}, {"model", "m"}, {"max_streams", "many"}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().what(), Catch::StartsWith("/max_streams: must be an integer"));
  bad = config_from_json({{"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("base_url is empty"));
}

TEST_CASE("a base URL may be given with or without /v1") {
  CHECK(normalized_base_url("http://h:8000") == "http://h:8000");
  CHECK(normalized_base_url("http://h:8000/") == "http://h:8000");
  CHECK(normalized_base_url("http://h:8000/v1/") == "http://h:8000");
  CHECK(normalized_base_url("https://api.example.com/v1") == "https://api.example.com");
}

TEST_CASE("a value with a control character is refused by name, without showing the value") {
  // A CR LF in anything that reaches the request line or a header would start a header of its own.
  const std::string injected = "\r\nX-Injected: yes";
  auto refused = [&](openai_config c, const char* field) {
    const std::string why = c.invalid();
    INFO(why);
    CHECK_THAT(why, Catch::Contains(field) && Catch::Contains("control character"));
    CHECK_THAT(why, !Catch::Contains("X-Injected"));
  };
  openai_config c = valid();
  c.base_url = "http://127.0.0.1:8000" + injected;
  refused(c, "base_url");
  c = valid();
  c.model = "Qwen/Qwen3-32B" + injected;
  refused(c, "model");
  c = valid();
  c.abort_path = "/abort_request" + injected;
  refused(c, "abort_path");
  c = valid();
  c.base_url = std::string("http://127.0.0.1:8000\x7f");
  refused(c, "base_url");
  c = valid();
  c.model = "tab\there";
  refused(c, "model");
}

TEST_CASE("configuration errors show base_url with its credentials redacted") {
  openai_config c = valid();
  c.base_url = "ftp://alice:s3cret@host:8000";
  const std::string why = c.invalid();
  CHECK_THAT(why, Catch::Contains("ftp://***@host:8000") && Catch::Contains("must start with http://"));
  CHECK_THAT(why, !Catch::Contains("s3cret"));
  c.base_url = "http://alice:s3cret@host:8000/?api_key=s3cret";
  CHECK_THAT(c.invalid(), Catch::Contains("http://***@host:8000/?api_key=***") && !Catch::Contains("s3cret"));
  auto bad = config_from_json({{"base_url", "alice:s3cret@host"}, {"model", "m"}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("***@host") && !Catch::Contains("s3cret"));
}

TEST_CASE("redact_url hides user names, passwords and credential parameters, and keeps the rest") {
  CHECK(redact_url("http://user:KEY@host:8000/v1") == "http://***@host:8000/v1");
  CHECK(redact_url("https://sk-only@api.example.com") == "https://***@api.example.com");
  CHECK(redact_url("http://u:p%40ss@[::1]:30000/x?y=1") == "http://***@[::1]:30000/x?y=1");
  CHECK(redact_url("user:KEY@host:8000") == "***@host:8000");
  CHECK(redact_url("http://host/v1/models?api_key=abc&model=q&Token=t;access_token=z#sig=s&x=1") ==
        "http://host/v1/models?api_key=***&model=q&Token=***;access_token=***#sig=***&x=1");
  CHECK(redact_url("http://host/a?key=1&apikey=2&x-api-key=3&password=4&client_secret=5&auth=6&keep=") ==
        "http://host/a?key=***&apikey=***&x-api-key=***&password=***&client_secret=***&auth=***&keep=");
  // Nothing to hide: unchanged, also an "@" in the path.
  for (const char* url : {"http://127.0.0.1:8000", "http://host/v1/a@b", "http://host/?q=1&model=m", "", "not a url", "http://h?"})
    CHECK(redact_url(url) == url);
}

TEST_CASE("a message quoting a server loses every secret the backend knows and becomes printable") {
  const openai::detail::scrubber scrub("http://alice:pw%21x@10.0.0.5:8000", "sk-key-123");
  // The key, the password as written and as sent, the Basic header libcurl made of them,
  // another URL's credentials, a terminal escape and a byte that is not UTF-8.
  const std::string said = "Bearer sk-key-123; pass pw%21x / pw!x; Basic YWxpY2U6cHcheA==; see "
                           "http://bob:other@x/?token=t \x1b[31m red \xff caf\xC3\xA9\nnext";
  CHECK(scrub.clean(said) == "Bearer ***; pass *** / ***; Basic ***; see http://***@x/?token=*** "
                             "\xEF\xBF\xBD[31m red \xEF\xBF\xBD caf\xC3\xA9\nnext");
  CHECK(openai::detail::scrubber().clean("plain text") == "plain text");
}
