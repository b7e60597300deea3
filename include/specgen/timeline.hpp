#pragma once
/// A Chrome-trace / Perfetto timeline of a run: a lane per GPU, reasoning
/// streams, forks and verdicts. Open the written file in ui.perfetto.dev or
/// chrome://tracing.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>

SPECGEN_BEGIN_NAMESPACE

class timeline {
 public:
  /// A complete span on `track` of `group` (a process row holding thread rows).
  void span(const std::string& group, const std::string& track, std::string name, timestamp begin, timestamp end,
            nlohmann::json args = nlohmann::json::object()) {
    events_.push_back({{"ph", "X"}, {"name", std::move(name)}, {"pid", pid(group)}, {"tid", tid(group, track)},
                       {"ts", us(begin)}, {"dur", us(end - begin)}, {"args", std::move(args)}});
  }
  /// A point event (a trigger firing, a termination).
  void instant(const std::string& group, const std::string& track, std::string name, timestamp at,
               nlohmann::json args = nlohmann::json::object()) {
    events_.push_back({{"ph", "i"}, {"s", "t"}, {"name", std::move(name)}, {"pid", pid(group)},
                       {"tid", tid(group, track)}, {"ts", us(at)}, {"args", std::move(args)}});
  }
  [[nodiscard]] std::size_t size() const noexcept { return events_.size(); }

  [[nodiscard]] nlohmann::json to_json() const {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& [g, p] : pids_)
      all.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", p}, {"args", {{"name", g}}}});
    for (const auto& [k, t] : tids_)
      all.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pids_.at(k.first)}, {"tid", t}, {"args", {{"name", k.second}}}});
    for (const auto& e : events_) all.push_back(e);
    return {{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}};
  }

  /// Write the trace; false (and nothing half-written left behind) on failure.
  bool write(const std::filesystem::path& path) const {
    const auto tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp);
      if (!out) return false;
      out << to_json().dump();
      if (!out.flush()) return false;
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    return !ec;
  }

 private:
  static double us(duration d) { return static_cast<double>(d.count()) / 1000.0; }
  int pid(const std::string& g) { return pids_.try_emplace(g, static_cast<int>(pids_.size()) + 1).first->second; }
  int tid(const std::string& g, const std::string& t) {
    return tids_.try_emplace({g, t}, static_cast<int>(tids_.size()) + 1).first->second;
  }
  std::vector<nlohmann::json> events_;
  std::map<std::string, int> pids_;
  std::map<std::pair<std::string, std::string>, int> tids_;
};

SPECGEN_END_NAMESPACE
