#pragma once
/// Where the verdict for a duplicate kernel is decided.
///
/// Lanes, forks and rounds often write the same kernel (two samples of one
/// fork agree; a later round rewrites an earlier answer). Evaluating each copy
/// would spend a compile, a validation and a profile on an answer already
/// known or coming, and would count one kernel as profiled twice. So every copy
/// of a kernel (same `candidate::content_hash()`) is admitted here first:
///
/// - a verdict journaled by an earlier segment of a resumed run is served;
/// - else, if one copy is judged (its verdict arrived), its verdict is served;
/// - else, if one copy is queued or running, the new copy waits for it;
/// - else (no copy yet, or the judged copy was dropped as stale) this copy is
///   the one evaluated.
///
/// When the evaluated copy gets its verdict, `settle` hands back the copies
/// that waited, to be served that verdict. When it is dropped instead, the
/// waiting copies come back too: the caller admits the ones it still wants
/// again, so the first of them is evaluated and the others wait for that one.
/// When a search ends, `forget` takes its waiting copies out.
///
/// The class decides; the engine acts (finalize, enqueue, cancel). It knows
/// nothing of searches or evaluators: `Ref` names a copy (the engine uses
/// (search, record index)), `Verdict` is what a copy is served.
///
/// @code
///   specgen::kernel_dedup<int, std::string> d;
///   const std::uint64_t h = 0x5eed;  // the kernel's content hash
///   d.admit(h, 1);            // {evaluate, new_kernel = true}
///   d.admit(h, 2);            // {wait}
///   d.settle(h, 1, "ok");     // returns {2}: serve it "ok"
///   d.admit(h, 3);            // {reuse, verdict = "ok"}
/// @endcode
#include <specgen/detail/config.hpp>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// What to do with a copy of a kernel.
enum class dedup_action {
  evaluate,  ///< the kernel's judged copy: compile, validate and profile it
  reuse,     ///< serve `admission::verdict`; nothing is evaluated
  wait,      ///< an identical copy is in flight: `settle` hands this one back with its verdict
};

/// The answer to `kernel_dedup::admit`.
template <class Verdict>
struct dedup_admission {
  dedup_action action = dedup_action::evaluate;
  std::optional<Verdict> verdict{};  ///< with `reuse`
  bool new_kernel = false;           ///< with `evaluate`: no copy of this kernel was seen before
};

template <class Ref, class Verdict>
class kernel_dedup {
 public:
  using key_type = std::uint64_t;  ///< a kernel's content hash
  using admission = dedup_admission<Verdict>;

  /// A verdict from an earlier segment of the run (the journal). It is served
  /// before anything else; the first remembered for a key stays.
  void remember(key_type key, Verdict v) { journaled_.emplace(key, std::move(v)); }

  /// A copy the journal shows as judged (`v`) or dropped (no `v`): when it is
  /// the first copy of its kernel, later copies see it as the judged one.
  void restore(key_type key, const Ref& copy, std::optional<Verdict> v) {
    judged_.try_emplace(key, judged_copy{copy, v ? state::judged : state::dropped, std::move(v)});
  }

  /// A new copy of kernel `key` (or a waiting copy admitted again after `settle`
  /// dropped the evaluated one): what to do with it.
  admission admit(key_type key, const Ref& copy) {
    if (auto j = journaled_.find(key); j != journaled_.end()) return {.action = dedup_action::reuse, .verdict = j->second};
    auto f = judged_.find(key);
    if (f == judged_.end()) {
      judged_.emplace(key, judged_copy{copy, state::in_flight, std::nullopt});
      return {.action = dedup_action::evaluate, .new_kernel = true};
    }
    switch (f->second.now) {
      case state::judged:
        return {.action = dedup_action::reuse, .verdict = f->second.verdict};
      case state::in_flight:
        // Two samples of one fork often agree: wait instead of evaluating twice.
        waiting_[key].push_back(copy);
        return {.action = dedup_action::wait};
      case state::dropped:
        break;
    }
    // The earlier copy was dropped as stale: this one is judged instead.
    f->second = judged_copy{copy, state::in_flight, std::nullopt};
    return {.action = dedup_action::evaluate};
  }

  /// Copy `copy` of kernel `key` got its final verdict `v`, or was dropped
  /// (no `v`). When it is the kernel's evaluated copy, returns the copies that
  /// waited for it, in arrival order: with a verdict, serve them `*v`; without
  /// one, admit again those still wanted (the others are the caller's to drop).
  /// Any other copy (a served or waiting one): nothing changes, returns none.
  std::vector<Ref> settle(key_type key, const Ref& copy, const std::optional<Verdict>& v) {
    auto f = judged_.find(key);
    if (f == judged_.end() || !(f->second.copy == copy)) return {};
    f->second.now = v ? state::judged : state::dropped;
    f->second.verdict = v;
    auto node = waiting_.extract(key);
    if (node.empty()) return {};
    return std::move(node.mapped());
  }

  /// Takes every waiting copy for which `gone(copy)` holds out of the waits
  /// (a search ended) and returns them, for the caller to drop. Judged copies
  /// stay: their verdicts still serve later copies.
  template <class Pred>
  std::vector<Ref> forget(Pred gone) {
    std::vector<Ref> out;
    for (auto& [key, waiting] : waiting_) {
      std::vector<Ref> keep;
      for (const auto& c : waiting)
        if (gone(c)) out.push_back(c);
        else keep.push_back(c);
      waiting = std::move(keep);
    }
    std::erase_if(waiting_, [](const auto& kv) { return kv.second.empty(); });
    return out;
  }

  /// Copies waiting for kernel `key`'s verdict.
  [[nodiscard]] std::size_t waiting(key_type key) const {
    auto w = waiting_.find(key);
    return w == waiting_.end() ? 0 : w->second.size();
  }

 private:
  enum class state { in_flight, judged, dropped };
  struct judged_copy {
    Ref copy;
    state now = state::in_flight;
    std::optional<Verdict> verdict{};
  };

  std::unordered_map<key_type, Verdict> journaled_;
  /// The copy that is (or was) evaluated, per kernel. Kept after a search ends:
  /// its verdict serves copies in every search of the run.
  std::unordered_map<key_type, judged_copy> judged_;
  /// Copies waiting for the evaluated copy's verdict. An unordered_map walked
  /// by `forget`: its order is the order in which copies are dropped.
  std::unordered_map<key_type, std::vector<Ref>> waiting_;
};

SPECGEN_END_NAMESPACE
