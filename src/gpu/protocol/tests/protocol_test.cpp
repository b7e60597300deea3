// The worker protocol as a specification: what goes on the wire, and what the
// decoder makes of any cut of it and of bytes that are not the protocol.
#include "gpu/protocol/protocol.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <vector>

using namespace specgen::gpu;

namespace {

std::vector<frame> sample_frames() {
  std::string binary(1000, '\0');
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7);
  return {
      {message_type::hello, 0, encode_body({{"protocol", 1}, {"pid", 42}})},
      {message_type::ping, 1, {}},
      {message_type::pong, 1, {}},
      make_request(2, {.op = "echo", .args = {{"x", 1}}, .binary = binary}),
      make_response(2, {.ok = true, .result = {{"x", 1}}, .error = {}, .binary = binary}),
      {message_type::log, 0, encode_body({{"text", "hi"}})},
      {message_type::shutdown, 0xffffffffffffffffull, {}},
  };
}

std::string wire(const std::vector<frame>& frames) {
  std::string out;
  for (const auto& f : frames) out += encode(f);
  return out;
}

// Feeds `bytes` in the given chunk sizes, collecting frames; fails the test on an error.
std::vector<frame> decode_in_chunks(std::string_view bytes, const std::vector<std::size_t>& cuts) {
  frame_decoder dec;
  std::vector<frame> out;
  std::size_t at = 0;
  auto drain = [&] {
    while (true) {
      auto f = dec.next();
      REQUIRE(f.has_value());
      if (!*f) return;
      out.push_back(**f);
    }
  };
  for (std::size_t n : cuts) {
    dec.feed(bytes.substr(at, n));
    at += n;
    drain();
  }
  dec.feed(bytes.substr(at));
  drain();
  CHECK(dec.buffered() == 0);
  return out;
}

std::string header(std::string_view magic, std::uint16_t version, std::uint16_t type, std::uint32_t length) {
  std::string h(magic);
  specgen::gpu::detail::put_le(h, version, 2);
  specgen::gpu::detail::put_le(h, type, 2);
  specgen::gpu::detail::put_le(h, 9, 8);
  specgen::gpu::detail::put_le(h, length, 4);
  return h;
}

decode_error first_error(std::string_view bytes) {
  frame_decoder dec;
  dec.feed(bytes);
  while (true) {
    auto f = dec.next();
    if (!f) return f.error();
    REQUIRE(*f);  // the bytes are meant to fail before they run out
  }
}

}  // namespace

TEST_CASE("a frame header is 20 little-endian bytes: magic, version, type, id, length") {
  std::string w = encode({message_type::pong, 0x0102030405060708ull, "abc"});
  REQUIRE(w.size() == frame_header_size + 3);
  CHECK(w.substr(0, 4) == "SGW1");
  CHECK(w.substr(4, 2) == std::string("\x01\x00", 2));
  CHECK(w.substr(6, 2) == std::string("\x03\x00", 2));
  CHECK(w.substr(8, 8) == std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  CHECK(w.substr(16, 4) == std::string("\x03\x00\x00\x00", 4));
  CHECK(w.substr(20) == "abc");
}

TEST_CASE("frames survive being fed one byte at a time") {
  auto frames = sample_frames();
  std::string w = wire(frames);
  CHECK(decode_in_chunks(w, std::vector<std::size_t>(w.size(), 1)) == frames);
}

TEST_CASE("frames survive any random split of the stream") {
  auto frames = sample_frames();
  std::string w = wire(frames);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> cuts;
    for (std::size_t left = w.size(); left > 0;) {
      std::size_t n = std::min<std::size_t>(left, rng() % 64 + 1);
      cuts.push_back(n);
      left -= n;
    }
    REQUIRE(decode_in_chunks(w, cuts) == frames);
  }
}

TEST_CASE("a frame cut short is waited for, not reported") {
  std::string w = encode(make_request(5, {.op = "echo", .args = {}, .binary = {}}));
  frame_decoder dec;
  dec.feed(std::string_view(w).substr(0, w.size() - 1));
  auto f = dec.next();
  REQUIRE(f);
  CHECK_FALSE(*f);
  CHECK(dec.buffered() == w.size() - 1);
}

TEST_CASE("requests and responses round-trip through their bodies") {
  request r{.op = "validate", .args = {{"kernel", "k"}, {"n", 3}}, .binary = std::string("\0\1\2", 3)};
  auto back = read_request(make_request(1, r));
  REQUIRE(back);
  CHECK(back->op == "validate");
  CHECK(back->args == r.args);
  CHECK(back->binary == r.binary);

  auto ok = read_response(make_response(1, {.ok = true, .result = {{"ms", 1.5}}, .error = {}, .binary = "out"}));
  REQUIRE(ok);
  CHECK(ok->ok);
  CHECK(ok->result["ms"] == 1.5);
  CHECK(ok->binary == "out");

  auto bad = read_response(make_response(1, {.ok = false, .result = {}, .error = "not implemented", .binary = {}}));
  REQUIRE(bad);
  CHECK_FALSE(bad->ok);
  CHECK(bad->error == "not implemented");
}

TEST_CASE("bytes that do not start with the magic are bad_magic as soon as the first byte differs") {
  auto e = first_error("X");
  CHECK(e.what == decode_error::kind::bad_magic);
  CHECK_THAT(e.message, Catch::Contains("SGW1"));
  CHECK(first_error("SGX").what == decode_error::kind::bad_magic);
}

TEST_CASE("another protocol version is unsupported_version") {
  auto e = first_error(header("SGW1", 2, 1, 0));
  CHECK(e.what == decode_error::kind::unsupported_version);
  CHECK_THAT(e.message, Catch::Contains("version 2"));
}

TEST_CASE("an unknown message type is unknown_type") {
  CHECK(first_error(header("SGW1", 1, 99, 0)).what == decode_error::kind::unknown_type);
  CHECK(first_error(header("SGW1", 1, 0, 0)).what == decode_error::kind::unknown_type);
}

TEST_CASE("a declared length over the limit is oversized before any payload arrives") {
  auto e = first_error(header("SGW1", 1, 5, max_payload + 1));
  CHECK(e.what == decode_error::kind::oversized);
  frame_decoder small(16);
  small.feed(encode({message_type::log, 0, std::string(17, 'x')}));
  auto f = small.next();
  REQUIRE_FALSE(f);
  CHECK(f.error().what == decode_error::kind::oversized);
}

TEST_CASE("a failed decoder stays failed and holds no bytes") {
  frame_decoder dec;
  dec.feed("garbage");
  REQUIRE_FALSE(dec.next());
  dec.feed(encode({message_type::ping, 1, {}}));
  CHECK(dec.failed());
  CHECK(dec.buffered() == 0);
  CHECK_FALSE(dec.next());
}

TEST_CASE("malformed bodies are bad_body errors, not exceptions") {
  CHECK(decode_body("ab").error().what == decode_error::kind::bad_body);
  std::string too_long;
  specgen::gpu::detail::put_le(too_long, 100, 4);
  too_long += "{}";
  CHECK(decode_body(too_long).error().what == decode_error::kind::bad_body);
  CHECK(decode_body(encode_body(nullptr).replace(4, 4, "{{{{")).error().what == decode_error::kind::bad_body);
  CHECK_FALSE(read_request({message_type::request, 1, encode_body({{"args", 1}})}));
  CHECK_FALSE(read_response({message_type::response, 1, encode_body({{"ok", "yes"}})}));
}

TEST_CASE("a body key of the wrong type is a bad_body error naming its JSON pointer; unknown keys are ignored") {
  auto no_op = read_request({message_type::request, 1, encode_body({{"args", 1}})});
  REQUIRE_FALSE(no_op);
  CHECK(no_op.error().what == decode_error::kind::bad_body);
  CHECK(no_op.error().message == "request body: /op: missing (required)");
  auto op = read_request({message_type::request, 1, encode_body({{"op", {{"name", "run"}}}})});
  REQUIRE_FALSE(op);
  CHECK(op.error().message == "request body: /op: expected a string, found object {\"name\":\"run\"}");
  auto array = read_request({message_type::request, 1, encode_body({1, 2})});
  REQUIRE_FALSE(array);
  CHECK(array.error().message == "request body: /: expected an object, found array");

  auto ok = read_response({message_type::response, 1, encode_body({{"ok", "yes"}})});
  REQUIRE_FALSE(ok);
  CHECK(ok.error().message == "response body: /ok: expected true or false, found string \"yes\"");
  auto err = read_response({message_type::response, 1, encode_body({{"ok", false}, {"error", {{"text", "x"}}}})});
  REQUIRE_FALSE(err);
  CHECK(err.error().message == "response body: /error: expected a string, found object {\"text\":\"x\"}");

  // Open: a newer peer's extra keys are ignored; a refusal without a message still reads.
  auto newer = read_request({message_type::request, 1, encode_body({{"op", "echo"}, {"args", {{"a", 1}}}, {"trace", true}})});
  REQUIRE(newer);
  CHECK(newer->op == "echo");
  CHECK(newer->args == nlohmann::json{{"a", 1}});
  auto refused = read_response({message_type::response, 1, encode_body({{"ok", false}, {"took_ms", 3}})});
  REQUIRE(refused);
  CHECK(refused->error == "(no error message)");

  CHECK(read_log({message_type::log, 0, encode_body({{"text", "hi"}, {"level", 2}})}).value() == "hi");
  CHECK(read_log({message_type::log, 0, encode_body({{"level", 2}})}).value() == R"({"level":2})");
  auto log = read_log({message_type::log, 0, encode_body({{"text", 5}})});
  REQUIRE_FALSE(log);
  CHECK(log.error().message == "log body: /text: expected a string, found number 5");
}

TEST_CASE("random bytes never crash the decoder") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::string junk(rng() % 200, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    if (trial % 2) junk = std::string("SGW1\x01\x00", 6) + junk;  // get past the magic half the time
    frame_decoder dec(1 << 16);
    dec.feed(junk);
    for (int i = 0; i < 10; ++i) {
      auto f = dec.next();
      if (!f || !*f) break;
      CHECK((*f)->payload.size() <= (1u << 16));
    }
    CHECK(dec.buffered() <= junk.size());
  }
}

TEST_CASE("a response may say its binary part is in the bulk region, never both there and in the frame") {
  auto moved = read_response(make_response(3, {.ok = true, .result = {{"n", 1}}, .error = {}, .binary = {}, .bulk = 4096}));
  REQUIRE(moved);
  CHECK(moved->bulk == 4096);
  CHECK(moved->binary.empty());
  auto plain = read_response(make_response(3, {.ok = true, .result = {}, .error = {}, .binary = "x"}));
  REQUIRE(plain);
  CHECK(plain->bulk == 0);

  const std::string both = R"({"ok": true, "result": {}, "bulk": 10})";
  auto body = [](const std::string& json, const std::string& bin) {
    return encode_body(nlohmann::json::parse(json), bin);
  };
  auto twice = read_response({message_type::response, 3, body(both, "xy")});
  REQUIRE_FALSE(twice);
  CHECK(twice.error().message == "response body: /bulk: the binary part is in the bulk region or in the frame, not both; "
                                 "the frame has 2 binary bytes");
  auto negative = read_response({message_type::response, 3, body(R"({"ok": true, "bulk": -1})", "")});
  REQUIRE_FALSE(negative);
  CHECK(negative.error().message == "response body: /bulk: expected an integer in [0, 18446744073709551615], found number -1");
  CHECK(read_response({message_type::response, 3, body(both, "")}));
}
