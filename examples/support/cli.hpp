#pragma once
/// The programs' command lines, read with CLI11: every option is declared once,
/// with its help text, and --help is made from those declarations.
///
/// Values are kept as given and converted where a program reads them, so that a
/// number is checked against the range its help text states and every program
/// words a bad one the same way (`--tasks -1: must be an integer in [1, 10000]`).
/// Errors say which option is wrong; the programs exit with status 2 for them.
#include <specgen/detail/limits.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace specgen::programs {

/// The options of one program or subcommand, declared on its CLI::App. The
/// object must outlive the parse (CLI11 writes into it).
class options {
 public:
  explicit options(CLI::App& app) : app_(&app) {}
  options(const options&) = delete;
  options& operator=(const options&) = delete;

  /// `--name VALUE` (or `--name=VALUE`); given twice, the last one counts.
  options& value(const std::string& name, const std::string& type, const std::string& help) {
    opts_[name] = app_->add_option("--" + name, values_[name], help)
                      ->type_name(type)
                      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    return *this;
  }
  /// `--name`, taking no value.
  options& flag(const std::string& name, const std::string& help) {
    opts_[name] = app_->add_flag("--" + name, help);
    return *this;
  }
  /// `--name A B C`: every value up to the next option; repeated, the values add up.
  options& list(const std::string& name, const std::string& type, const std::string& help) {
    opts_[name] = app_->add_option("--" + name, lists_[name], help)->type_name(type)->expected(1, CLI::detail::expected_max_vector_size);
    return *this;
  }
  /// Puts the options declared next under `title` in --help.
  options& group(const std::string& title) {
    app_->option_defaults()->group(title);
    return *this;
  }

  [[nodiscard]] bool has(const std::string& name) const {
    auto it = opts_.find(name);
    return it != opts_.end() && it->second->count() > 0;
  }
  /// The value of `--name` (a list's last one), or `fallback` when absent.
  [[nodiscard]] std::string get(const std::string& name, std::string fallback = {}) const {
    if (!has(name)) return fallback;
    if (auto it = lists_.find(name); it != lists_.end()) return it->second.back();
    return values_.at(name);
  }
  /// The value of `--name` as a number in `r` (the range the help text gives),
  /// or `fallback` when the option is absent. Anything else, "-1" for a count,
  /// "inf" or "nan" included, throws std::invalid_argument saying what the
  /// option accepts. Without `r`, any finite value of T.
  template <class T>
  [[nodiscard]] T number(const std::string& name, T fallback, const detail::range<T>& r = detail::any_value<T>()) const {
    if (!has(name)) return fallback;
    const std::string s = get(name);
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc{} && p == s.data() + s.size() && r.contains(v)) return v;
    throw std::invalid_argument(fmt::format("--{} {}: must be {}", name, s, r.describe()));
  }
  /// Every value of a list option, in the order given (empty when absent);
  /// for any other option, its value as a list of one (or none).
  [[nodiscard]] std::vector<std::string> values(const std::string& name) const {
    if (auto it = lists_.find(name); it != lists_.end()) return it->second;
    if (has(name)) return {get(name)};
    return {};
  }

 private:
  CLI::App* app_;
  // std::map: CLI11 holds pointers to the values, which must not move.
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::map<std::string, CLI::Option*> opts_;
};

/// A program's CLI::App, worded the same way for every program: help from the
/// declarations, and arguments no option takes left for parse() to name.
inline void configure(CLI::App& app) {
  app.allow_extras();
  app.get_formatter()->column_width(28);
}

/// Parses the command line. Returns false after printing the help (--help);
/// throws std::invalid_argument naming the option for a bad or unknown one, and
/// for an argument no option takes (unless `extra` is given: then those are
/// put there, for the caller to judge).
inline bool parse(CLI::App& app, int argc, char** argv, std::vector<std::string>* extra = nullptr) {
  // CLI11 hands an option its first value whatever it looks like: a list
  // followed by another option would take that option as a task file.
  auto is_option = [](std::string_view a) { return a.starts_with("--") || a == "-h"; };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (!a.starts_with("--") || a.find('=') != std::string_view::npos) continue;
    std::vector<CLI::App*> apps{&app};
    for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) apps.push_back(sub);
    for (auto* owner : apps)
      if (const CLI::Option* o = owner->get_option_no_throw(std::string(a)); o && o->get_items_expected_max() > 1)
        if (i + 1 >= argc || is_option(argv[i + 1])) throw std::invalid_argument(fmt::format("{} needs at least one value", a));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(e.what());
  }
  std::vector<std::string> rest = app.remaining(true);
  for (const auto& r : rest)
    if (r.size() > 1 && r.front() == '-') throw std::invalid_argument(fmt::format("unknown option {} (try --help)", r));
  if (extra)
    *extra = std::move(rest);
  else if (!rest.empty())
    throw std::invalid_argument(fmt::format("unexpected argument '{}'", rest.front()));
  return true;
}

/// A program of several commands (`specgen-bench e2e --tasks 2`): each a CLI11
/// subcommand with its own options and help, and what runs it.
class subcommands {
 public:
  using runner = std::function<int(const std::string& name, const options&)>;

  explicit subcommands(CLI::App& app) : app_(&app) {}
  /// Adds `name`, run by `run` when it is the command given; declare its
  /// options on the object returned.
  options& add(const std::string& name, const std::string& help, runner run) {
    CLI::App* sub = app_->add_subcommand(name, help);
    entries_.push_back(std::make_unique<entry>(entry{sub, std::make_unique<options>(*sub), std::move(run)}));
    return *entries_.back()->opts;
  }
  /// The command given, or nullptr when none was.
  [[nodiscard]] const CLI::App* given() const {
    for (const auto& e : entries_)
      if (e->app->parsed()) return e->app;
    return nullptr;
  }
  /// Runs the command given (given() must not be nullptr).
  int run() const {
    for (const auto& e : entries_)
      if (e->app->parsed()) return e->run(e->app->get_name(), *e->opts);
    throw std::logic_error("no command given");
  }

 private:
  struct entry {
    CLI::App* app;
    std::unique_ptr<options> opts;
    runner run;
  };
  CLI::App* app_;
  std::vector<std::unique_ptr<entry>> entries_;
};

/// "a,b,,c" -> {"a", "b", "c"}: a comma-separated option value.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    auto c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    if (c > pos) out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

}  // namespace specgen::programs
