// Helpers shared by the GPU tests that judge a corpus of candidate kernels
// (tests/gpu/adversarial_test.cpp, tests/kernelbench/gpu_kernelbench_test.cpp,
// tests/suite/suite_test.cpp):
// reading corpus entries, checking their plans against compiled kernels, and
// the "no GPU" message. Header-only; each test includes it once.
#pragma once

#include <specgen/gpu/compiler.hpp>
#include <specgen/plan.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace specgen_test {

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// An entry's "expect": a verdict kind or a non-empty list of them.
inline std::vector<specgen::verdict_kind> read_expect(const nlohmann::json& ex, const std::string& where) {
  std::vector<std::string> kinds;
  if (ex.is_string()) kinds.push_back(ex.get<std::string>());
  else kinds = ex.get<std::vector<std::string>>();
  if (kinds.empty()) throw std::runtime_error(where + ": 'expect' is empty");
  std::vector<specgen::verdict_kind> out;
  for (const auto& k : kinds) {
    auto v = specgen::parse_verdict(k);
    if (!v) throw std::runtime_error(where + ": unknown verdict '" + k + "'");
    out.push_back(*v);
  }
  return out;
}

/// A string, or an array of lines each followed by a newline (the task format's rule).
inline std::string text_or_lines(const nlohmann::json& j, const std::string& what) {
  if (j.is_string()) return j.get<std::string>();
  if (!j.is_array()) throw std::runtime_error(what + ": expected a string or an array of lines");
  std::string out;
  for (const auto& line : j) {
    if (!line.is_string()) throw std::runtime_error(what + ": every line must be a string");
    out += line.get<std::string>();
    out += '\n';
  }
  return out;
}

/// The keys every corpus entry has or may have; a test's own keys come on top.
struct corpus_entry {
  std::filesystem::path file{};
  std::string name{};
  std::string task{};    ///< as the entry writes it (a task file or a task name, per corpus)
  std::string source{};  ///< "source", or the text of "source_file" (relative to the entry's directory)
  std::string plan{};
  std::vector<specgen::verdict_kind> expect{};
  std::string why{};
  nlohmann::json json{};  ///< the whole entry, for the test's own keys
};

/// Reads one entry: an object with exactly the keys name, task, plan, expect,
/// why, one of source / source_file, and `extra_required`, and no keys beyond
/// those and `extra_optional`. `name` must be the file name without ".json";
/// `expect` is a verdict kind or a list of them, `ok` never one of several.
inline corpus_entry parse_corpus_entry(const std::filesystem::path& file, const std::vector<std::string>& extra_required = {},
                                       const std::vector<std::string>& extra_optional = {}) {
  const auto j = nlohmann::json::parse(read_text(file), nullptr, true, /*ignore_comments=*/true);
  const std::string where = file.filename().string();
  if (!j.is_object()) throw std::runtime_error(where + ": not a JSON object");
  std::set<std::string> allowed{"name", "task", "source", "source_file", "plan", "expect", "why"};
  allowed.insert(extra_required.begin(), extra_required.end());
  allowed.insert(extra_optional.begin(), extra_optional.end());
  for (const auto& [k, v] : j.items())
    if (!allowed.contains(k)) throw std::runtime_error(where + ": unknown key '" + k + "'");
  std::vector<std::string> required{"name", "task", "plan", "expect", "why"};
  required.insert(required.end(), extra_required.begin(), extra_required.end());
  for (const auto& k : required)
    if (!j.contains(k)) throw std::runtime_error(where + ": missing key '" + k + "'");
  corpus_entry e;
  e.file = file;
  e.json = j;
  e.name = j.at("name").get<std::string>();
  if (e.name + ".json" != file.filename().string())
    throw std::runtime_error(where + ": the file must be named after the entry ('" + e.name + ".json')");
  e.task = j.at("task").get<std::string>();
  if (j.contains("source") == j.contains("source_file"))
    throw std::runtime_error(where + ": exactly one of 'source' and 'source_file'");
  e.source = j.contains("source") ? text_or_lines(j.at("source"), where + ": source")
                                  : read_text(file.parent_path() / j.at("source_file").get<std::string>());
  e.plan = text_or_lines(j.at("plan"), where + ": plan");
  e.expect = read_expect(j.at("expect"), where);
  const bool has_ok =
      std::find(e.expect.begin(), e.expect.end(), specgen::verdict_kind::ok) != e.expect.end();
  if (has_ok && e.expect.size() != 1)
    throw std::runtime_error(where + ": 'ok' may not be one of several acceptable verdicts");
  e.why = j.at("why").get<std::string>();
  return e;
}

/// The regular `*.json` files of `dir`, sorted.
inline std::vector<std::filesystem::path> json_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(dir))
    if (f.is_regular_file() && f.path().extension() == ".json") files.push_back(f.path());
  std::sort(files.begin(), files.end());
  return files;
}

inline bool expects(const corpus_entry& e, specgen::verdict_kind v) {
  return std::find(e.expect.begin(), e.expect.end(), v) != e.expect.end();
}

/// The acceptable verdicts, "wrong_result|nonfinite_output".
inline std::string expect_text(const corpus_entry& e) {
  std::string s;
  for (auto v : e.expect) s += (s.empty() ? "" : "|") + std::string(to_string(v));
  return s;
}

inline std::vector<specgen::shape_binding> all_shapes(const specgen::task& t) {
  auto shapes = t.validation_shapes;
  shapes.push_back(t.benchmark_shape);
  return shapes;
}

enum class trust { task_plan, candidate };

/// Why the plan cannot run against `kernels` (it does not parse, breaks a
/// candidate's rules, or launches a kernel the cubin lacks), or "".
inline std::string plan_problem(const std::string& plan_text, const std::vector<specgen::gpu::kernel_resources>& kernels,
                                trust who) {
  auto plan = specgen::parse_plan(plan_text);
  if (!plan) return plan.error().what();
  if (who == trust::candidate)
    if (auto refused = specgen::check_candidate_plan(*plan)) return refused->what();
  for (const auto& k : specgen::kernel_names(*plan))
    if (std::none_of(kernels.begin(), kernels.end(), [&](const auto& r) { return r.name == k; }))
      return "the plan launches '" + k + "', which the compiled source does not define";
  return {};
}

/// As above, and it must also resolve on an H200 at every shape of the task.
inline std::string plan_problem(const specgen::task& t, const std::string& plan_text,
                                const std::vector<specgen::gpu::kernel_resources>& kernels, trust who) {
  if (auto p = plan_problem(plan_text, kernels, who); !p.empty()) return p;
  auto plan = specgen::parse_plan(plan_text);
  for (const auto& shape : all_shapes(t)) {
    auto r = specgen::resolve(*plan, t, shape, specgen::device_limits{});
    if (!r) return r.error().what();
  }
  return {};
}

inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

/// "no GPU: <reason>", whether or not the reason already says so.
inline std::string no_gpu_text(const std::string& message) {
  return message.starts_with("no GPU") ? message : "no GPU: " + message;
}

}  // namespace specgen_test
