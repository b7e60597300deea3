// specgen-report: one or more runs as one self-contained HTML page.
//
//   specgen-report specgen-out                      # a run directory -> specgen-out/report.html
//   specgen-report -o cmp.html out/sequential out/specgen
//   specgen-report journals/                        # specgen-bench --journal-dir: each mode a run
//
// The page needs no network and no server: open it in any browser.
#include "support/args.hpp"

#include <specgen/report.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace {

constexpr const char* usage = R"(usage: specgen-report [options] PATH...

Writes one HTML file that shows the runs PATH... names, side by side:
  - the best speedup over time per task (several runs overlaid) and its geomean;
  - per search: the reasoning rounds, the forks (coloured by trigger), the
    early terminations and the round ends;
  - per GPU: the compile, validate and profile jobs coloured by verdict, and
    the pool's utilisation over time;
  - verdicts, tokens and forks per task; the best kernel per task with its
    source and plan.

A PATH is a run directory (specgen-run --out: journal.jsonl and results.json),
a directory of journals (specgen-bench --journal-dir: each <mode>.jsonl is a
run named after its mode), or one journal file.

Options:
  -o, --out FILE   where to write the page (default: report.html in the first
                   PATH when it is a directory, else ./report.html)
  --title TEXT     the page's title (default "specgen report")

Exit status: 0 when the page was written; 2 for a bad flag or a PATH that
holds no readable journal (the message names the file and line).
)";

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::string out_flag, title = "specgen report";
  try {
    // "-o FILE" is the one short option; args knows long options only.
    std::vector<char*> rest{argv[0]};
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) == "-o") {
        if (i + 1 >= argc) throw std::invalid_argument("-o needs a value");
        out_flag = argv[++i];
      } else {
        rest.push_back(argv[i]);
      }
    }
    specgen::programs::args a(static_cast<int>(rest.size()), rest.data(), {"out", "title"}, {"help"});
    if (a.has("help")) {
      fmt::print("{}", usage);
      return 0;
    }
    if (a.has("out")) out_flag = a.get("out");
    if (a.has("title")) title = a.get("title");
    paths = a.positional();
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
      fmt::print(stderr, "specgen-report: {}\n", r.error().message);
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
