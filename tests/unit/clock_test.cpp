#include <specgen/clock.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

using namespace specgen;

TEST_CASE("virtual loop jumps to the next timer and runs equal times in schedule order") {
  event_loop<virtual_clock> loop;
  std::vector<int> order;
  loop.after(seconds(2), [&] { order.push_back(2); });
  loop.after(seconds(1), [&] { order.push_back(1); });
  loop.after(seconds(2), [&] { order.push_back(3); });
  CHECK(loop.run() == 3);
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK(loop.now() == seconds(2));
}

TEST_CASE("a cancelled timer never runs") {
  event_loop<virtual_clock> loop;
  bool ran = false;
  auto id = loop.after(seconds(1), [&] { ran = true; });
  CHECK(loop.cancel(id));
  CHECK_FALSE(loop.cancel(id));
  loop.run();
  CHECK_FALSE(ran);
  CHECK(loop.now() == seconds(0));
}

TEST_CASE("stop ends run after the current callback") {
  event_loop<virtual_clock> loop;
  int ran = 0;
  loop.after(seconds(1), [&] { ++ran; loop.stop(); });
  loop.after(seconds(2), [&] { ++ran; });
  loop.run();
  CHECK(ran == 1);
  CHECK(loop.pending_timers() == 1);
}

TEST_CASE("a real loop runs posts from other threads and sleeps until its timers") {
  event_loop<steady_clock> loop;
  bool posted = false, timed = false;
  loop.post([&] { posted = true; });
  loop.after(std::chrono::milliseconds(5), [&] { timed = true; });
  loop.run();
  CHECK(posted);
  CHECK(timed);
  CHECK(loop.now() >= std::chrono::milliseconds(5));
}

TEST_CASE("seconds() refuses a duration that does not fit its nanoseconds instead of wrapping to t = 0") {
  CHECK(seconds(1e9) == std::chrono::seconds(1'000'000'000));
  CHECK(seconds(-2.5) == std::chrono::milliseconds(-2500));
  CHECK_THROWS_AS(seconds(1e10), std::out_of_range);  // 10^19 ns overflows 64 bits
  CHECK_THROWS_AS(seconds(-1e10), std::out_of_range);
  CHECK_THROWS_AS(seconds(std::numeric_limits<double>::infinity()), std::out_of_range);
  CHECK_THROWS_AS(seconds(std::nan("")), std::out_of_range);
}
