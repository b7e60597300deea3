#pragma once
/// Search strategies: how each round's prompts are built and which earlier
/// kernels they build on. Speculation, termination, pools and KV storage work
/// unchanged under every strategy (the paper applies its mechanisms on top of
/// each baseline's search).
///
/// A strategy is a pure function of the search so far: `plan_round` sees every
/// candidate record of the search and returns one prompt per parallel lane.
/// Keeping strategies stateless makes resume-from-journal exact.
///
/// @code
///   specgen::policy::any_strategy s = specgen::policy::evolve{{.lanes = 4, .population = 8}};
///   const specgen::policy::search_view view{.for_task = &task, .round = 1};  // the engine fills in the records
///   auto lanes = s.plan_round(view);   // 4 prompts, parents chosen by tournament
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/family.hpp>
#include <specgen/prompt.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace policy {

/// What a strategy sees of a search when it plans a round.
struct search_view {
  const task* for_task = nullptr;
  int round = 0;                                 ///< the round being planned
  std::span<const candidate_record> records{};     ///< every candidate of the search, in creation order
  std::uint64_t seed = 0;                        ///< per-search seed
  std::span<const extract_miss> misses{};        ///< answers without a kernel, in order
};

/// One parallel reasoning stream of a round: what its prompt shows (the
/// engine renders it with the configured prompt builder) and the kernels it
/// builds on.
struct lane_plan {
  int lane = 0;
  prompt_content content{};
  std::vector<candidate_id> parents{};
};

template <class S>
concept search_strategy = requires(const S& s, const search_view& v) {
  { s.plan_round(v) } -> std::same_as<std::vector<lane_plan>>;
  { s.name() } -> std::convertible_to<std::string>;
  { s.lanes() } -> std::convertible_to<int>;
} && std::copy_constructible<S>;  // members first: `expected<any_strategy>` is no strategy, without recursing into its copy

}  // namespace policy

namespace detail {
/// Records of `round` (optionally of one lane), in creation order.
inline std::vector<const candidate_record*> records_of(const policy::search_view& v, int round, int lane = -1) {
  std::vector<const candidate_record*> out;
  for (const auto& r : v.records)
    if (r.cand->prov.round == round && (lane < 0 || r.cand->prov.lane == lane)) out.push_back(&r);
  return out;
}

/// The fastest profiled record (optionally of one lane); ties go to the earlier.
inline const candidate_record* best_of(const policy::search_view& v, int lane = -1) {
  const candidate_record* best = nullptr;
  for (const auto& r : v.records)
    if (r.profiled() && (lane < 0 || r.cand->prov.lane == lane) && (!best || r.speedup() > best->speedup()))
      best = &r;
  return best;
}

/// Answers of `round` (optionally of one lane) from which no kernel could be extracted.
inline std::vector<const extract_miss*> misses_of(const policy::search_view& v, int round, int lane = -1) {
  std::vector<const extract_miss*> out;
  for (const auto& m : v.misses)
    if (m.prov.round == round && (lane < 0 || m.prov.lane == lane)) out.push_back(&m);
  return out;
}

/// The kernel a lane wrote last in `round`: its final answer if it gave one,
/// else its newest draft; nullptr when it wrote none.
inline const candidate_record* last_of(const policy::search_view& v, int round, int lane = -1) {
  const candidate_record* last = nullptr;
  for (const auto& r : v.records) {
    if (r.cand->prov.round != round || (lane >= 0 && r.cand->prov.lane != lane)) continue;
    if (!last || r.cand->prov.from == origin::main || last->cand->prov.from != origin::main) last = &r;
  }
  return last;
}

/// A lane's prompt content: the task, the kernels shown with their roles, the
/// round before's attempts and answers without a kernel (of `lane`, or all).
inline policy::lane_plan make_lane(const policy::search_view& v, int lane, std::vector<shown_kernel> kernels, int feedback_lane,
                           std::string instruction) {
  policy::lane_plan lp{.lane = lane, .content = {}, .parents = {}};
  lp.content.for_task = v.for_task;
  lp.content.round = v.round;
  for (const auto& k : kernels) lp.parents.push_back(k.record->cand->id);
  lp.content.kernels = std::move(kernels);
  lp.content.attempts = records_of(v, v.round - 1, feedback_lane);
  lp.content.misses = misses_of(v, v.round - 1, feedback_lane);
  lp.content.instruction = std::move(instruction);
  return lp;
}
}  // namespace detail

namespace policy {

/// Iterative refinement of the best kernel with judge-style feedback (as
/// CudaForge does): the prompt shows the best kernel so far and the last one
/// written, and reports the round before's attempts.
struct refine_best {
  struct params {
    template <class Self, class F>
    static void fields(Self&, F&&) {}  // nothing to configure
    friend bool operator==(const params&, const params&) = default;
  } p{};
  [[nodiscard]] const params& get_params() const noexcept { return p; }

  [[nodiscard]] std::string name() const { return "refine"; }
  [[nodiscard]] int lanes() const noexcept { return 1; }
  [[nodiscard]] std::vector<lane_plan> plan_round(const search_view& v) const {
    std::vector<shown_kernel> kernels;
    const auto* best = detail::best_of(v);
    if (best) kernels.push_back({best, "current best"});
    const auto* last = detail::last_of(v, v.round - 1);
    if (last && (!best || last->cand->content_hash() != best->cand->content_hash())) kernels.push_back({last, "your last kernel"});
    return {detail::make_lane(v, 0, std::move(kernels), -1,
                              best ? "Improve on the current best kernel, fixing the problems reported above."
                                   : "Write a correct kernel that beats the baseline, fixing the problems reported above.")};
  }
};

/// Several independent seeds, each refined on its own lineage (as KernelAgent's parallel workers do).
struct parallel_seeds {
  struct params {
    int seeds = 4;
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("seeds", s.seeds, detail::in(1, limits::max_lanes));
    }
    friend bool operator==(const params&, const params&) = default;
  } p{};
  [[nodiscard]] const params& get_params() const noexcept { return p; }

  [[nodiscard]] std::string name() const { return "parallel"; }
  [[nodiscard]] int lanes() const noexcept { return p.seeds; }
  [[nodiscard]] std::vector<lane_plan> plan_round(const search_view& v) const {
    std::vector<lane_plan> out;
    for (int lane = 0; lane < p.seeds; ++lane) {
      // Each worker refines its own seed: the best kernel of its lineage, and hears only of its own attempts.
      std::vector<shown_kernel> kernels;
      if (const auto* b = detail::best_of(v, lane)) kernels.push_back({b, "your lane's best"});
      out.push_back(detail::make_lane(v, lane, std::move(kernels), lane,
                                      fmt::format("You are worker {} of {}: explore your own approach.", lane + 1, p.seeds)));
    }
    return out;
  }
};

/// An evolutionary population with tournament parent selection (AlphaEvolve-style).
struct evolve {
  struct params {
    int lanes = 4;          ///< children per round
    int population = 8;     ///< best distinct profiled kernels kept
    int tournament = 3;     ///< entrants per parent selection
    int inspirations = 1;   ///< extra population members shown for crossover
    template <class Self, class F>
    static void fields(Self& s, F&& f) {
      f("lanes", s.lanes, detail::in(1, limits::max_lanes));
      f("population", s.population, detail::in(1, 100'000));
      // Each entrant is a draw, each inspiration a kernel in the prompt.
      f("tournament", s.tournament, detail::in(1, 100));
      f("inspirations", s.inspirations, detail::in(0, 16));
    }
    friend bool operator==(const params&, const params&) = default;
  } p{};
  [[nodiscard]] const params& get_params() const noexcept { return p; }

  [[nodiscard]] std::string name() const { return "evolve"; }
  [[nodiscard]] int lanes() const noexcept { return p.lanes; }
  [[nodiscard]] std::vector<lane_plan> plan_round(const search_view& v) const {
    // Population: the best `population` profiled kernels, fastest first.
    std::vector<const candidate_record*> pop;
    for (const auto& r : v.records)
      if (r.profiled() && !r.reused) pop.push_back(&r);
    std::stable_sort(pop.begin(), pop.end(), [](auto* a, auto* b) { return a->speedup() > b->speedup(); });
    if (pop.size() > static_cast<std::size_t>(p.population)) pop.resize(static_cast<std::size_t>(p.population));

    std::mt19937_64 rng(v.seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(v.round + 1)));
    auto pick = [&]() -> const candidate_record* {
      if (pop.empty()) return nullptr;
      std::uniform_int_distribution<std::size_t> d(0, pop.size() - 1);
      std::size_t best = d(rng);
      for (int i = 1; i < p.tournament; ++i) best = std::min(best, d(rng));  // pop is sorted: lower index = fitter
      return pop[best];
    };
    std::vector<lane_plan> out;
    for (int lane = 0; lane < p.lanes; ++lane) {
      std::vector<shown_kernel> kernels;
      if (const auto* parent = pick()) {
        kernels.push_back({parent, "parent"});
        for (int i = 0; i < p.inspirations; ++i)
          if (const auto* insp = pick(); insp && insp != parent) kernels.push_back({insp, "inspiration"});
      }
      // Children hear only of their own lane's last attempts: feedback stays attributable.
      const bool fresh = kernels.empty();
      out.push_back(detail::make_lane(v, lane, std::move(kernels), lane,
                                      fresh ? "Write a correct kernel that beats the baseline."
                                            : "Combine the strengths of the kernels above into a faster one."));
    }
    return out;
  }
};

/// How `any_strategy` forwards the family's calls.
struct strategy_interface {
  struct calls {
    virtual ~calls() = default;
    virtual std::vector<lane_plan> plan_round(const search_view&) const = 0;
    virtual int lanes() const = 0;
  };
  template <class Base, class T>
  struct impl : detail::policy_holder<Base, T> {
    using detail::policy_holder<Base, T>::policy_holder;
    std::vector<lane_plan> plan_round(const search_view& v) const override { return this->value.plan_round(v); }
    int lanes() const override { return this->value.lanes(); }
  };
};

/// Type-erased strategy, so a CLI or JSON config picks one at run time.
/// Strategies are immutable once built: copies share one instance.
class any_strategy : public basic_any<strategy_interface, ownership::shared> {
 public:
  /// Throws std::invalid_argument when a built-in strategy's params are out
  /// of range (a programming error: JSON configs are checked where read).
  template <search_strategy S>
    requires(!std::derived_from<std::remove_cvref_t<S>, any_strategy>)
  any_strategy(S s) : basic_any(std::move(s)) {}  // NOLINT implicit by design
  any_strategy() : any_strategy(refine_best{}) {}

  [[nodiscard]] std::vector<lane_plan> plan_round(const search_view& v) const { return self().plan_round(v); }
  [[nodiscard]] int lanes() const { return self().lanes(); }
};

static_assert(search_strategy<refine_best>);
static_assert(search_strategy<parallel_seeds>);
static_assert(search_strategy<evolve>);
static_assert(search_strategy<any_strategy>);

/// The strategy family: its name in configs and its kinds.
struct strategy_family {
  using any = any_strategy;
  static constexpr std::string_view name = "strategy";
  static constexpr std::array<builder<any_strategy>, 3> kinds{{from_params<any_strategy, refine_best>("refine"),
                                                               from_params<any_strategy, parallel_seeds>("parallel"),
                                                               from_params<any_strategy, evolve>("evolve")}};
};

/// Build a strategy from JSON: `"refine"`, `{"parallel": {"seeds": 4}}`,
/// `{"evolve": {"lanes": 4, "population": 8, "tournament": 3}}`.
inline expected<any_strategy, error> make_strategy(const nlohmann::json& j) { return make<strategy_family>(j); }

}  // namespace policy

SPECGEN_END_NAMESPACE
