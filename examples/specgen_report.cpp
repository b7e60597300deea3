// specgen-report: one or more runs as one self-contained HTML page.
//
//   specgen-report specgen-out                      # a run directory -> specgen-out/report.html
//   specgen-report -o cmp.html out/sequential out/specgen
//   specgen-report journals/                        # specgen-bench --journal-dir: each mode a run
//
// The page needs no network and no server: open it in any browser.
#include "support/cli.hpp"

#include <specgen/report.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace {

constexpr const char* description = R"(Writes one HTML file that shows the runs PATH... names, side by side:
  - the best speedup over time per task (several runs overlaid) and its geomean;
  - per search: the reasoning rounds, the forks (coloured by trigger), the
    early terminations and the round ends;
  - per GPU: the compile, validate and profile jobs coloured by verdict, and
    the pool's utilisation over time;
  - verdicts, tokens and forks per task; the best kernel per task with its
    source and plan.

A PATH is a run directory (specgen-run --out: journal.jsonl and results.json),
a directory of journals (specgen-bench --journal-dir: each <mode>.jsonl is a
run named after its mode), or one journal file.)";

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::string out_flag, title = "specgen report";
  try {
    CLI::App app(description, "specgen-report");
    specgen::programs::configure(app);
    app.footer("Exit status: 0 when the page was written; 2 for a bad flag or a PATH that\n"
               "holds no readable journal (the message names the file and line).");
    app.add_option("-o,--out", out_flag,
                   "where to write the page (default: report.html in the first\n"
                   "PATH when it is a directory, else ./report.html)")
        ->type_name("FILE")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.add_option("--title", title, "the page's title (default \"specgen report\")")->type_name("TEXT")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.add_option("path", paths, "run directories and journals")->type_name("PATH...");
    if (!specgen::programs::parse(app, argc, argv)) return 0;
    if (paths.empty()) throw std::invalid_argument("name at least one run directory or journal (try --help)");
  } catch (const std::exception& e) {
    fmt::print(stderr, "specgen-report: {}\n", e.what());
    return 2;
  }

  const specgen::report_options options{.title = title};
  std::vector<specgen::report_run> runs;
  for (const auto& p : paths) {
    auto r = specgen::load_report_runs(p, options);
    if (!r) {
      fmt::print(stderr, "specgen-report: {}\n", r.error().what());
      return 2;
    }
    for (auto& run : *r) {
      for (const auto& note : run.notes) fmt::print(stderr, "specgen-report: note: {}\n", note);
      runs.push_back(std::move(run));
    }
  }
  std::error_code ec;
  const fs::path out = !out_flag.empty()                       ? fs::path(out_flag)
                       : fs::is_directory(paths.front(), ec) ? fs::path(paths.front()) / "report.html"
                                                               : fs::path("report.html");
  const std::string page = specgen::render_report(runs, options);
  std::ofstream f(out, std::ios::binary);
  f << page;
  f.close();
  if (!f) {
    fmt::print(stderr, "specgen-report: cannot write {}\n", out.string());
    return 2;
  }
  fmt::print("wrote {} ({} run{}, {:.1f} MB): open it in a browser\n", out.string(), runs.size(),
             runs.size() == 1 ? "" : "s", static_cast<double>(page.size()) / 1e6);
  return 0;
}
