// kernel_dedup alone: which copy of a kernel is evaluated, which reuse a
// verdict, which wait, and what settling and forgetting hand back.
#include <specgen/kernel_dedup.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

using namespace specgen;

namespace {

using ref = std::pair<int, int>;  // (search, record), as the engine names a copy
using dedup = kernel_dedup<ref, std::string>;

}  // namespace

TEST_CASE("kernel_dedup: the first copy is evaluated, a copy in flight waits, a judged copy's verdict is reused") {
  dedup d;
  auto first = d.admit(7, {0, 0});
  CHECK(first.action == dedup_action::evaluate);
  CHECK(first.new_kernel);
  CHECK_FALSE(first.verdict);

  auto second = d.admit(7, {0, 1});
  CHECK(second.action == dedup_action::wait);
  CHECK_FALSE(second.new_kernel);
  auto third = d.admit(7, {1, 0});
  CHECK(third.action == dedup_action::wait);
  CHECK(d.waiting(7) == 2);

  // Another kernel is independent.
  CHECK(d.admit(8, {0, 2}).action == dedup_action::evaluate);

  CHECK(d.settle(7, {0, 0}, std::string("ok")) == std::vector<ref>{{0, 1}, {1, 0}});
  CHECK(d.waiting(7) == 0);

  auto later = d.admit(7, {2, 5});
  CHECK(later.action == dedup_action::reuse);
  CHECK(later.verdict == "ok");
  CHECK_FALSE(later.new_kernel);
}

TEST_CASE("kernel_dedup: settling a copy that is not the evaluated one changes nothing") {
  dedup d;
  d.admit(1, {0, 0});
  d.admit(1, {0, 1});
  CHECK(d.settle(1, {0, 1}, std::nullopt).empty());   // the waiting copy was dropped
  CHECK(d.settle(2, {0, 0}, std::string("x")).empty());  // an unknown kernel
  CHECK(d.waiting(1) == 1);
  CHECK(d.admit(1, {0, 2}).action == dedup_action::wait);
  CHECK(d.settle(1, {0, 0}, std::string("ok")) == std::vector<ref>{{0, 1}, {0, 2}});
}

TEST_CASE("kernel_dedup: when the evaluated copy is dropped, the waiters come back and the first admitted again is evaluated") {
  dedup d;
  d.admit(3, {0, 0});
  d.admit(3, {1, 0});
  d.admit(3, {1, 1});
  d.admit(3, {2, 0});
  const auto back = d.settle(3, {0, 0}, std::nullopt);
  REQUIRE(back == std::vector<ref>{{1, 0}, {1, 1}, {2, 0}});
  // The caller drops {1, 0} (its round is over) and admits the others again.
  auto a = d.admit(3, {1, 1});
  CHECK(a.action == dedup_action::evaluate);
  CHECK_FALSE(a.new_kernel);  // the kernel was seen before
  CHECK(d.admit(3, {2, 0}).action == dedup_action::wait);
  CHECK(d.settle(3, {1, 1}, std::string("slow")) == std::vector<ref>{{2, 0}});
  CHECK(d.admit(3, {3, 0}).verdict == "slow");
}

TEST_CASE("kernel_dedup: a dropped copy without waiters leaves the next copy to be evaluated") {
  dedup d;
  d.admit(4, {0, 0});
  CHECK(d.settle(4, {0, 0}, std::nullopt).empty());
  auto next = d.admit(4, {0, 1});
  CHECK(next.action == dedup_action::evaluate);
  CHECK_FALSE(next.new_kernel);
}

TEST_CASE("kernel_dedup: journaled verdicts are served first; restored copies stand as the judged ones") {
  dedup d;
  d.remember(5, "journaled");
  d.remember(5, "later");  // the first remembered stays
  d.restore(5, {0, 0}, std::string("own"));
  auto a = d.admit(5, {0, 1});
  CHECK(a.action == dedup_action::reuse);
  CHECK(a.verdict == "journaled");

  // A copy judged in the journal (no journaled verdict for its key, as when the
  // caller restores one without remembering it) serves its own verdict.
  d.restore(6, {0, 2}, std::string("own"));
  d.restore(6, {0, 3}, std::nullopt);  // only the first restored copy counts
  CHECK(d.admit(6, {0, 4}).verdict == "own");

  // A copy the journal shows as dropped: the next copy is evaluated.
  d.restore(9, {0, 5}, std::nullopt);
  auto b = d.admit(9, {0, 6});
  CHECK(b.action == dedup_action::evaluate);
  CHECK_FALSE(b.new_kernel);
  CHECK(d.admit(9, {0, 7}).action == dedup_action::wait);
}

TEST_CASE("kernel_dedup: forget takes a search's waiting copies out and keeps the verdicts") {
  dedup d;
  d.admit(1, {0, 0});
  d.admit(1, {1, 0});
  d.admit(1, {2, 0});
  d.admit(1, {1, 1});
  d.admit(2, {2, 1});
  d.admit(2, {1, 2});
  auto gone = d.forget([](const ref& c) { return c.first == 1; });
  std::sort(gone.begin(), gone.end());
  CHECK(gone == std::vector<ref>{{1, 0}, {1, 1}, {1, 2}});
  CHECK(d.waiting(1) == 1);
  CHECK(d.waiting(2) == 0);
  CHECK(d.forget([](const ref&) { return false; }).empty());
  CHECK(d.settle(1, {0, 0}, std::string("ok")) == std::vector<ref>{{2, 0}});
  CHECK(d.admit(1, {1, 5}).verdict == "ok");
}
