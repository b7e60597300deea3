// The backend's configuration: presets, checks and JSON, with the messages a
// user sees.
#include "config.hpp"

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
  check(c, "family.answer_cue: must be a string");
  c.family = {{"think_close", ""}};
  check(c, "think_close is empty");
  c.family = {{"cue", "x"}};
  check(c, "family: unknown parameter 'cue'");
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
  CHECK_THAT(bad.error().message, Catch::Contains("openai: unknown parameter 'max_stream'"));
  bad = config_from_json({{"base_url", "http://h"}, {"model", "m"}, {"max_streams", "many"}});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("openai.max_streams: must be an integer"));
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
