#pragma once
/// The run report: one self-contained HTML file (no network, no server) that
/// shows one or more runs: the best speedup over time per task (runs
/// overlaid), the reasoning streams with their forks and terminations, what
/// each GPU did and how busy the pool was, verdicts, tokens and forks per task,
/// and the best kernel per task with its source. `specgen-report` is the
/// command; `specgen-run --report` writes one at the end of a run.
///
/// @code
///   std::vector<specgen::report_run> runs;
///   for (const char* dir : {"out/sequential", "out/specgen"}) {
///     auto r = specgen::load_report_runs(dir);       // a run directory, a journal, or a directory of journals
///     if (!r) return fail(r.error().message);
///     runs.insert(runs.end(), r->begin(), r->end());
///   }
///   std::ofstream("report.html") << specgen::render_report(runs);
/// @endcode
///
/// A run is read from its journal (docs/journal.md), which holds every record
/// the views need; the run's results.json, when it lies beside the journal,
/// adds the evaluator's name and the run's summary. The page's data model is
/// documented in docs/report.md.
#include <specgen/detail/config.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/detail/report_page.hpp>
#include <specgen/expected.hpp>
#include <specgen/journal.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// How the page is made.
struct report_options {
  std::string title = "specgen report";
  /// A best kernel's source (and plan) longer than this is cut, with a note.
  std::size_t max_source_bytes = 64 * 1024;
};

/// One run as the page shows it.
struct report_run {
  std::string label;                ///< its name in legends: the journal's stem or the run directory's name
  std::filesystem::path source;     ///< the journal it was read from
  nlohmann::json data;              ///< the page's "Run" object (docs/report.md)
  std::vector<std::string> notes;   ///< what was skipped while reading (a torn last line, ...)
};

namespace detail::report {

using nlohmann::json;

/// Times in the page: seconds, to the microsecond (keeps large runs small).
inline double seconds(std::int64_t ns) { return std::round(static_cast<double>(ns) / 1e3) / 1e6; }

/// An index table: each distinct name once, in order of first use.
class names {
 public:
  int operator()(const std::string& name) {
    auto [it, added] = index_.try_emplace(name, static_cast<int>(list_.size()));
    if (added) list_.push_back(name);
    return it->second;
  }
  [[nodiscard]] const std::vector<std::string>& list() const { return list_; }

 private:
  std::map<std::string, int> index_;
  std::vector<std::string> list_;
};

/// A number that may be written as "inf" / "nan" (docs/journal.md): null when
/// absent or not finite; a value of another type throws json_read_error.
inline json finite(const json& j, std::string_view key) {
  std::optional<double> v;
  read_key(j, key, v);
  return v && std::isfinite(*v) ? json(*v) : json(nullptr);
}

/// The speedup of the `timing` object of `j` (an evaluation record or an evaluation), if any.
inline json speedup_in(const json& j) {
  if (present(j, "timing") == nullptr) return nullptr;
  return within(j, "timing", [](const json& timing) { return finite(timing, "speedup"); });
}

/// The verdict's kind of the `result` object of `j`, by name: the report shows
/// kinds a newer version adds as they are.
inline std::string kind_in(const json& j) {
  return within(j, "result", [](const json& v) { return required_key<std::string>(v, "kind"); });
}

struct fork_span {
  int lane = 0, round = 0, trigger = 0;
  std::int64_t prefix_tokens = 0, samples = 0;
  std::string trigger_name;
  std::int64_t t0 = 0, t1 = 0;
};

struct search_acc {
  int id = 0;
  std::string task;
  std::optional<std::int64_t> end_ns;
  std::string end_reason;
  json best_speedup = nullptr;
  std::int64_t best = 0, rounds = 0, tokens = 0, forks = 0, terminations = 0, candidates = 0;
  double best_so_far = 0;
  json best_curve = json::array(), streams = json::array(), terminations_at = json::array(),
       round_ends = json::array();
  std::map<int, std::int64_t> round_started;   // round -> t_ns
  std::vector<fork_span> forks_seen;
  std::map<std::string, std::int64_t> verdicts;
};

struct candidate_info {
  int search = 0;
  std::string source, plan;
  std::int64_t created_ns = 0;
};

/// Builds one run's page data from its journal records, in file order. Like
/// resuming, it reads the journal format as deliberately open (json_fields.hpp):
/// keys and record types it does not know are ignored, and a missing optional
/// key takes a default, so the report reads journals of older and newer
/// versions. A key of the wrong type is an error, never a silent default.
class builder {
 public:
  explicit builder(std::size_t max_source) : max_source_(max_source) {}

  /// One record; throws json_read_error naming the JSON pointer of what is wrong.
  void add(const json& r) {
    const auto type = required_key<std::string>(r, "type");
    const auto t = required_key<std::int64_t>(r, "t_ns");
    end_ns_ = std::max(end_ns_, t);
    if (type == journal_records::search_start) {
      auto& s = search(required_key<int>(r, "search"));
      read_key(r, "task", s.task);
    } else if (type == journal_records::round_start) {
      auto& s = search(required_key<int>(r, "search"));
      s.round_started[required_key<int>(r, "round")] = t;
    } else if (type == journal_records::round_end) {
      auto& s = search(required_key<int>(r, "search"));
      const int round = required_key<int>(r, "round");
      const auto reason = key_or(r, "reason", std::string());
      auto started = s.round_started.find(round);
      const std::int64_t t0 = started == s.round_started.end() ? t : started->second;
      s.streams.push_back(json::array({key_or(r, "lane", 0), seconds(t0), seconds(t), round, reason}));
      s.round_ends.push_back(json::array({seconds(t), round, reason}));
      read_key(r, "generated_tokens", s.tokens);
      s.rounds = std::max<std::int64_t>(s.rounds, round + 1);
    } else if (type == journal_records::fork) {
      auto& s = search(required_key<int>(r, "search"));
      ++s.forks;
      fork_span f{.lane = key_or(r, "lane", 0),
                  .round = key_or(r, "round", 0),
                  .trigger = 0,
                  .prefix_tokens = key_or<std::int64_t>(r, "prefix_tokens", 0),
                  .samples = key_or<std::int64_t>(r, "samples", 1),
                  .trigger_name = key_or(r, "trigger", std::string("unknown")),
                  .t0 = t,
                  .t1 = t};
      f.trigger = triggers_(f.trigger_name);
      s.forks_seen.push_back(std::move(f));
    } else if (type == journal_records::terminated) {
      auto& s = search(required_key<int>(r, "search"));
      ++s.terminations;
      s.terminations_at.push_back(json::array({seconds(t), key_or(r, "lane", 0), key_or<std::int64_t>(r, "by", 0)}));
    } else if (type == journal_records::candidate) {
      within(r, "candidate", [&](const json& c) {
        const auto id = required_key<std::int64_t>(c, "id");
        const auto prov = required_key<provenance>(c, "prov");
        auto& s = search(prov.search);
        ++s.candidates;
        candidates_[id] = {.search = s.id,
                           .source = key_or(c, "source", std::string()),
                           .plan = key_or(c, "plan", std::string()),
                           .created_ns = t};
        fork_ended(s, prov, t);
      });
    } else if (type == journal_records::extract_failed) {
      auto& s = search(required_key<int>(r, "search"));
      provenance prov;
      read_json(r, prov);  // the record's round, lane, origin, trigger, prefix_tokens, sample
      fork_ended(s, prov, t);
    } else if (type == journal_records::evaluation) {
      evaluation(r, t);
    } else if (type == journal_records::search_end) {
      auto& s = search(required_key<int>(r, "search"));
      s.end_ns = t;
      s.end_reason = key_or(r, "reason", std::string());
      s.best_speedup = finite(r, "best_speedup");
      s.best = key_or<std::int64_t>(r, "best", 0);
      read_key(r, "rounds", s.rounds);
      read_key(r, "generated_tokens", s.tokens);
    } else if (type == journal_records::run_end) {
      summary_ = {{"e2e_s", finite(r, "e2e_seconds")},
                  {"tokens", key_or<std::int64_t>(r, "generated_tokens", 0)},
                  {"profiled", key_or<std::int64_t>(r, "profiled_kernels", 0)},
                  {"pool_utilization", finite(r, "pool_utilization")},
                  {"stream_failures", key_or<std::int64_t>(r, "stream_failures", 0)}};
    }
    // Other record types (run_start, prompt, cancelled, ...) add nothing the views show.
  }

  /// results.json of the same run: the evaluator's name and the run's summary.
  /// Open like the journal; throws json_read_error for a key of the wrong type.
  void add_results(const json& results) {
    read_key(results, "evaluator", evaluator_);
    if (auto g = finite(results, "best_speedup_geomean"); !g.is_null()) summary_["geomean"] = g;
    if (auto e = finite(results, "e2e_seconds"); !e.is_null()) summary_["e2e_s"] = e;
    if (auto u = finite(results, "pool_utilization"); !u.is_null()) summary_["pool_utilization"] = u;
  }

  [[nodiscard]] json finish(const std::string& label, const std::filesystem::path& source) {
    json searches = json::array();
    std::map<std::string, json> best_by_task;
    std::vector<double> logs;
    for (auto& [id, s] : searches_) {
      json forks = json::array();
      for (const auto& f : s.forks_seen)
        forks.push_back(json::array({f.lane, seconds(f.t0), seconds(f.t1), f.trigger, f.prefix_tokens, f.samples}));
      searches.push_back({{"id", s.id},
                          {"task", s.task},
                          {"end_t", s.end_ns ? json(seconds(*s.end_ns)) : json(nullptr)},
                          {"end_reason", s.end_ns ? json(s.end_reason) : json(nullptr)},
                          {"best_speedup", s.best_speedup},
                          {"best", s.best},
                          {"rounds", s.rounds},
                          {"tokens", s.tokens},
                          {"forks", s.forks},
                          {"terminations", s.terminations},
                          {"candidates", s.candidates},
                          {"verdicts", s.verdicts},
                          {"best_curve", s.best_curve},
                          {"streams", s.streams},
                          {"fork_spans", std::move(forks)},
                          {"terminations_at", s.terminations_at},
                          {"round_ends", s.round_ends}});
      if (s.best_speedup.is_number()) logs.push_back(std::log(s.best_speedup.get<double>()));
      auto c = candidates_.find(s.best);
      if (s.best == 0 || c == candidates_.end() || !s.best_speedup.is_number()) continue;
      const double speedup = s.best_speedup.get<double>();
      auto& slot = best_by_task[s.task];
      if (!slot.is_null() && slot["speedup"].get<double>() >= speedup) continue;
      slot = {{"task", s.task},
              {"search", s.id},
              {"candidate", s.best},
              {"speedup", speedup},
              {"t", best_time(s, speedup)},
              {"source", cut(c->second.source)},
              {"plan", cut(c->second.plan)}};
    }
    json best = json::array();
    for (auto& [task, b] : best_by_task) best.push_back(std::move(b));
    if (!summary_.contains("geomean") && !logs.empty()) {
      double sum = 0;
      for (double l : logs) sum += l;
      summary_["geomean"] = std::exp(sum / static_cast<double>(logs.size()));
    }
    if (!summary_.contains("e2e_s")) summary_["e2e_s"] = seconds(end_ns_);
    std::vector<std::string> device_rows = devices_.list();
    return {{"label", label},
            {"source", source.string()},
            {"evaluator", evaluator_.empty() ? json(nullptr) : json(evaluator_)},
            {"summary", summary_},
            {"stages", {"compile", "validate", "profile"}},
            {"verdicts", verdicts_.list()},
            {"triggers", triggers_.list()},
            {"devices", device_rows},
            {"jobs", std::move(jobs_)},
            {"searches", std::move(searches)},
            {"best", std::move(best)}};
  }

  /// Device rows in a stable order: compile first, then GPU 0, GPU 1, ...
  /// (jobs name them by index, so the table is fixed before any job is added).
  void declare_devices(int gpus) {
    devices_("compile");
    for (int d = 0; d < gpus; ++d) devices_(fmt::format("GPU {}", d));
  }

 private:
  search_acc& search(int id) {
    auto [it, added] = searches_.try_emplace(id);
    if (added) it->second.id = id;
    return it->second;
  }

  /// A fork's candidates and failed extractions end it: the latest one is its end.
  static void fork_ended(search_acc& s, const provenance& prov, std::int64_t t) {
    if (prov.from != origin::fork) return;
    for (auto f = s.forks_seen.rbegin(); f != s.forks_seen.rend(); ++f)
      if (f->lane == prov.lane && f->round == prov.round && f->prefix_tokens >= 0 &&
          static_cast<std::uint64_t>(f->prefix_tokens) == prov.prefix_tokens && f->trigger_name == prov.trigger) {
        f->t1 = std::max(f->t1, t);
        return;
      }
  }

  void evaluation(const json& r, std::int64_t t) {
    auto& s = search(required_key<int>(r, "search"));
    const auto cand = required_key<std::int64_t>(r, "candidate");
    if (key_or(r, "reused", false)) {
      // An identical kernel's evaluation: the candidate's final verdict, no device time.
      within(r, "evaluation", [&](const json& e) { final_verdict(s, kind_in(e), speedup_in(e), t, "profile"); });
      return;
    }
    const auto stage = required_key<std::string>(r, "stage");
    const std::string kind = kind_in(r);
    const auto busy = key_or<std::int64_t>(r, "busy_ns", 0);
    const auto device = key_or(r, "device", std::optional<int>());
    const int stage_index = stage == "compile" ? 0 : stage == "validate" ? 1 : 2;
    std::string row = "compile";
    if (stage != "compile") row = device ? fmt::format("GPU {}", *device) : "GPU";
    jobs_.push_back(json::array({devices_(row), seconds(t - busy), seconds(t), stage_index, verdicts_(kind), cand, s.id}));
    // The stage's verdict is the candidate's final one when it fails, or when it is the last stage.
    if (kind != "ok" || stage == "profile") final_verdict(s, kind, speedup_in(r), t, stage);
  }

  static void final_verdict(search_acc& s, const std::string& kind, const json& sp, std::int64_t t,
                           std::string_view stage) {
    ++s.verdicts[kind];
    if (kind != "ok" || stage != "profile" || !sp.is_number()) return;
    const double v = sp.get<double>();
    if (v > s.best_so_far) {
      s.best_so_far = v;
      s.best_curve.push_back(json::array({seconds(t), v}));
    }
  }

  static double best_time(const search_acc& s, double speedup) {
    for (const auto& p : s.best_curve)
      if (p[1].get<double>() >= speedup) return p[0].get<double>();
    return s.best_curve.empty() ? 0.0 : s.best_curve.back()[0].get<double>();
  }

  [[nodiscard]] std::string cut(const std::string& text) const {
    if (text.size() <= max_source_) return text;
    return text.substr(0, max_source_) + fmt::format("\n... ({} more bytes not shown)\n", text.size() - max_source_);
  }

  std::size_t max_source_;
  std::int64_t end_ns_ = 0;
  std::string evaluator_;
  json summary_ = json::object();
  json jobs_ = json::array();
  names verdicts_, triggers_, devices_;
  std::map<int, search_acc> searches_;
  std::map<std::int64_t, candidate_info> candidates_;
};

inline expected<std::string, error> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return unexpected(error{fmt::format("cannot read {}", p.string())});
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// The number of GPUs named by the journal's evaluation records (highest device index + 1).
inline int gpus_in(const std::vector<json>& records) {
  int most = 0;
  for (const auto& r : records)
    if (auto d = r.find("device"); d != r.end() && d->is_number_integer()) most = std::max(most, d->get<int>() + 1);
  return most;
}

}  // namespace detail::report

/// One journal as one run. `results`, when not empty and present, is the
/// run's results.json. A torn last line (a run killed mid-write) is skipped
/// with a note; any other line that is not a record is an error naming it.
inline expected<report_run, error> load_report_run(const std::filesystem::path& journal, std::string label,
                                                   const std::filesystem::path& results = {},
                                                   const report_options& options = {}) {
  using detail::report::json;
  auto text = detail::report::read_file(journal);
  if (!text) return unexpected(text.error());
  report_run run{.label = std::move(label), .source = journal, .data = {}, .notes = {}};
  std::vector<json> records;
  std::vector<std::size_t> lines;  // of each record
  std::size_t line = 0;
  for (std::size_t at = 0; at < text->size();) {
    const std::size_t nl = text->find('\n', at);
    const bool torn = nl == std::string::npos;
    const std::string_view body(text->data() + at, (torn ? text->size() : nl) - at);
    at = torn ? text->size() : nl + 1;
    ++line;
    if (body.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json r = json::parse(body, nullptr, /*allow_exceptions=*/false);
    const bool record = r.is_object() && r.contains("type") && r["type"].is_string() && r.contains("t_ns") &&
                        r["t_ns"].is_number_integer();
    if (!record && torn) {
      run.notes.push_back(fmt::format("{}:{}: a torn last line (the run was stopped while writing it) was skipped",
                                      journal.string(), line));
      break;
    }
    if (!record)
      return unexpected(error{.message = fmt::format("not a journal record (a JSON object with \"type\" and \"t_ns\"): {}",
                                                     std::string(body.substr(0, 120))),
                              .file = journal.string(),
                              .line = static_cast<int>(std::min<std::size_t>(line, INT_MAX))});
    records.push_back(std::move(r));
    lines.push_back(line);
  }
  if (records.empty()) return unexpected(error{fmt::format("{}: no journal records", journal.string())});
  detail::report::builder b(options.max_source_bytes);
  b.declare_devices(detail::report::gpus_in(records));
  for (std::size_t i = 0; i < records.size(); ++i) {
    try {
      b.add(records[i]);
    } catch (const detail::json_read_error& e) {
      // "run.jsonl: line 7: /search: missing (required) (in the round_start record)"
      error err = e.at(journal.string(), lines[i]);
      err.message += fmt::format(" (in the {} record)", records[i]["type"].get<std::string>());
      return unexpected(std::move(err));
    } catch (const std::exception& e) {
      return unexpected(error{.message = fmt::format("cannot read the {} record: {}", records[i]["type"].get<std::string>(), e.what()),
                              .file = journal.string(),
                              .line = static_cast<int>(std::min<std::size_t>(lines[i], INT_MAX))});
    }
  }
  if (!results.empty() && std::filesystem::exists(results)) {
    auto rtext = detail::report::read_file(results);
    if (!rtext) return unexpected(rtext.error());
    json rj = json::parse(*rtext, nullptr, false);
    if (!rj.is_object()) {
      run.notes.push_back(fmt::format("{}: not a JSON object; the summary comes from the journal", results.string()));
    } else {
      try {
        b.add_results(rj);
      } catch (const detail::json_read_error& e) {
        return unexpected(e.at(results.string()));
      }
    }
  }
  run.data = b.finish(run.label, journal);
  return run;
}

/// The runs one path names:
/// - a run directory (`specgen-run --out`): its journal.jsonl, with its results.json;
/// - a directory of journals (`specgen-bench --journal-dir`): each `<mode>.jsonl` as a run named `<mode>`;
/// - a journal file: one run named after the file (or its directory, for `journal.jsonl`).
inline expected<std::vector<report_run>, error> load_report_runs(const std::filesystem::path& path,
                                                                 const report_options& options = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto name_of_dir = [](const fs::path& d) {
    const fs::path abs = fs::absolute(d).lexically_normal();
    std::string n = (abs.has_filename() ? abs : abs.parent_path()).filename().string();
    return n.empty() ? std::string("run") : n;
  };
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "journal.jsonl")) {
      return load_report_run(path / "journal.jsonl", name_of_dir(path), path / "results.json", options)
          .transform([](report_run r) { return std::vector<report_run>{std::move(r)}; });
    }
    std::vector<fs::path> journals;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file() && e.path().extension() == ".jsonl") journals.push_back(e.path());
    if (journals.empty())
      return unexpected(error{fmt::format(
          "{}: no journal here (journal.jsonl of a run directory, or <mode>.jsonl files of specgen-bench --journal-dir)",
          path.string())});
    std::sort(journals.begin(), journals.end());
    std::vector<report_run> out;
    for (const auto& j : journals) {
      auto r = load_report_run(j, j.stem().string(), {}, options);
      if (!r) return unexpected(r.error());
      out.push_back(std::move(*r));
    }
    return out;
  }
  if (!fs::exists(path, ec)) return unexpected(error{fmt::format("{}: no such file or directory", path.string())});
  if (path.extension() == ".json")
    return unexpected(error{fmt::format(
        "{}: a JSON file, not a journal: name a run directory (specgen-run --out), a journal (.jsonl), or the "
        "directory of specgen-bench --journal-dir",
        path.string())});
  const bool run_journal = path.filename() == "journal.jsonl";
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return load_report_run(path, run_journal ? name_of_dir(dir) : path.stem().string(),
                         run_journal ? dir / "results.json" : fs::path(), options)
      .transform([](report_run r) { return std::vector<report_run>{std::move(r)}; });
}

/// The page: the report's HTML with every run's data in it. Labels that
/// repeat get " (2)", " (3)", ... so that legends tell the runs apart.
inline std::string render_report(std::span<const report_run> runs, const report_options& options = {}) {
  using detail::report::json;
  json data{{"format", "specgen-report/1"},
            {"generated_by", std::string("specgen-report ") + SPECGEN_VERSION_STRING},
            {"title", options.title},
            {"runs", json::array()}};
  std::map<std::string, int> seen;
  for (const auto& r : runs) {
    json d = r.data;
    const int n = ++seen[r.label];
    if (n > 1) d["label"] = fmt::format("{} ({})", r.label, n);
    d["notes"] = r.notes;
    data["runs"].push_back(std::move(d));
  }
  // Inside <script>: "</" would end the element early; "<\/" is the same JSON string.
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string safe;
  safe.reserve(text.size() + 64);
  for (std::size_t i = 0; i < text.size(); ++i) {
    safe += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') safe += '\\';
  }
  constexpr std::string_view marker = "__SPECGEN_REPORT_DATA__";
  const std::string_view page = detail::report_page;
  const std::size_t at = page.find(marker);
  std::string out;
  out.reserve(page.size() + safe.size());
  out.append(page.substr(0, at));
  out.append(safe);
  out.append(page.substr(at + marker.size()));
  return out;
}

SPECGEN_END_NAMESPACE
