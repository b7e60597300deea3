// The SSE parser: the same events for every way the bytes can be cut.
#include "sse.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using specgen::openai::detail::sse_parser;

namespace {

std::vector<std::string> parse_in_pieces(std::string_view stream, const std::vector<std::size_t>& cuts) {
  sse_parser p;
  std::vector<std::string> events;
  auto on = [&](std::string_view d) { events.emplace_back(d); };
  std::size_t at = 0;
  for (std::size_t cut : cuts) {
    REQUIRE(p.feed(stream.substr(at, cut - at), on));
    at = cut;
  }
  REQUIRE(p.feed(stream.substr(at), on));
  p.finish(on);
  return events;
}

std::vector<std::string> parse_whole(std::string_view stream) { return parse_in_pieces(stream, {}); }

}  // namespace

TEST_CASE("an SSE stream gives the same events however its bytes are split") {
  // vLLM-like chunks with multi-byte UTF-8 (a CJK character, an emoji), a
  // keep-alive comment, CRLF and CR line ends, and [DONE].
  const std::string stream =
      ": keep-alive\n\n"
      "data: {\"delta\":\"\xE4\xB8\xAD\xE6\x96\x87\"}\n\n"
      "data: {\"delta\":\"\xF0\x9F\x9A\x80 go\"}\r\n\r\n"
      "event: message\nid: 7\nretry: 100\ndata: {\"x\":1}\r\r"
      "data: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"delta\":\"\xE4\xB8\xAD\xE6\x96\x87\"}", "{\"delta\":\"\xF0\x9F\x9A\x80 go\"}",
                                         "{\"x\":1}", "[DONE]"};
  REQUIRE(parse_whole(stream) == want);
  // Every single cut and every pair of cuts: inside CRLF, inside a UTF-8
  // character, inside "data:", between the two newlines of an event's end.
  for (std::size_t i = 1; i < stream.size(); ++i) {
    INFO("cut at " << i);
    CHECK(parse_in_pieces(stream, {i}) == want);
    for (std::size_t j = i + 1; j < stream.size(); j += 3) {
      INFO("and at " << j);
      CHECK(parse_in_pieces(stream, {i, j}) == want);
    }
  }
  // One byte at a time.
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < stream.size(); ++i) every.push_back(i);
  CHECK(parse_in_pieces(stream, every) == want);
}

TEST_CASE("SSE comment lines (keep-alives) produce no event and do not end one") {
  CHECK(parse_in_pieces(": ping\n\n: ping\ndata: a\n: ping\ndata: b\n\n:\n\n", {3, 9}) == std::vector<std::string>{"a\nb"});
}

TEST_CASE("SSE data lines of one event are joined with newlines, fields other than data are ignored") {
  CHECK(parse_whole("data: one\ndata:two\ndata\nevent: x\n\n") == std::vector<std::string>{"one\ntwo\n"});
  // "data:  x" keeps the second space: only one is stripped.
  CHECK(parse_whole("data:  x\n\n") == std::vector<std::string>{" x"});
  // An event without data is not dispatched.
  CHECK(parse_whole("event: ping\n\nid: 3\n\n").empty());
}

TEST_CASE("a last SSE event cut off before its blank line is still delivered, a half line is not") {
  CHECK(parse_whole("data: a\n\ndata: b\n") == std::vector<std::string>{"a", "b"});
  CHECK(parse_whole("data: a\n\ndata: {\"unfinish") == std::vector<std::string>{"a"});
}

TEST_CASE("a UTF-8 byte order mark opening an SSE stream is skipped, even split") {
  const std::string stream = "\xEF\xBB\xBF" "data: a\n\n";
  for (std::size_t i = 1; i < 4; ++i) CHECK(parse_in_pieces(stream, {i}) == std::vector<std::string>{"a"});
  // Bytes that only start like a BOM are data.
  CHECK(parse_whole("\xEF" "data: a\n\n").empty());  // the line is "\xEF" "data: a": not a data field
}

TEST_CASE("reset forgets a half-read SSE event") {
  sse_parser p;
  std::vector<std::string> events;
  auto on = [&](std::string_view d) { events.emplace_back(d); };
  CHECK(p.feed("data: stale\ndata: more", on));
  CHECK(events.empty());
  p.reset();
  CHECK(p.feed("data: fresh\n\n", on));
  CHECK(events == std::vector<std::string>{"fresh"});
}

TEST_CASE("an SSE line longer than the limit stops the parser without buffering it, however it is split") {
  const std::string big = "data: " + std::string(5000, 'x') + "\n\n";
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, big.size()}) {
    INFO("pieces of " << piece);
    sse_parser p(1024);
    std::vector<std::string> events;
    auto on = [&](std::string_view d) { events.emplace_back(d); };
    REQUIRE(p.feed("data: small\n\n", on));
    bool ok = true;
    for (std::size_t at = 0; at < big.size() && ok; at += piece) ok = p.feed(std::string_view(big).substr(at, piece), on);
    CHECK_FALSE(ok);
    CHECK(p.overflowed());
    CHECK(events == std::vector<std::string>{"small"});  // what came before the long line was delivered
    CHECK_FALSE(p.feed("data: later\n\n", on));            // and nothing after it is
    p.finish(on);
    CHECK(events.size() == 1);
    p.reset();  // a retried request starts over
    CHECK(p.feed("data: again\n\n", on));
    CHECK(events.back() == "again");
  }
}

TEST_CASE("an SSE event whose data lines together pass the limit stops the parser; one at the limit passes") {
  sse_parser p(1024);
  std::vector<std::string> events;
  auto on = [&](std::string_view d) { events.emplace_back(d); };
  const std::string line = "data: " + std::string(511, 'y') + "\n";  // two of them: 511 + 1 + 511 = 1023 bytes of data
  CHECK(p.feed(line + line + "\n", on));
  REQUIRE(events.size() == 1);
  CHECK(events[0].size() == 1023);
  CHECK_FALSE(p.feed(line + line + line, on));  // 1535 bytes in one event, each line short
  CHECK(p.overflowed());
}
