// ptxas -v output, as NVRTC 13 prints it (one block per entry function):
//   ptxas info    : Compiling entry function 'add' for 'sm_90a'
//   ptxas info    : Function properties for add
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem
// Non-inlined device functions get "Function properties for <fn>" blocks of their
// own, which must not overwrite the entry's spills and stack frame.
// A compile that NVRTC answers from its own cache has no such report at all;
// the cubin's own records (cubin_kernels.cpp) fill in what the log lacks.
#include <specgen/gpu/compiler.hpp>

#include <cctype>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {
namespace {

/// The integer written just before `unit` in `line` ("10" in "Used 10 registers"), if any.
std::optional<int> number_before(std::string_view line, std::string_view unit) {
  const auto at = line.find(unit);
  if (at == std::string_view::npos) return std::nullopt;
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  if (begin == end) return std::nullopt;
  int v = 0;
  for (std::size_t i = begin; i < end; ++i) v = v * 10 + (line[i] - '0');
  return v;
}

/// The text between the first pair of single quotes after `marker`, if `marker` is in `line`.
std::optional<std::string_view> quoted_after(std::string_view line, std::string_view marker) {
  const auto at = line.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  const auto open = line.find('\'', at + marker.size());
  if (open == std::string_view::npos) return std::nullopt;
  const auto close = line.find('\'', open + 1);
  if (close == std::string_view::npos) return std::nullopt;
  return line.substr(open + 1, close - open - 1);
}

}  // namespace

std::vector<kernel_resources> parse_ptxas_info(std::string_view log) {
  std::vector<kernel_resources> kernels;
  bool in_entry_properties = false;  // the last "Function properties for" named the current entry
  while (!log.empty()) {
    const auto nl = log.find('\n');
    const std::string_view line = log.substr(0, nl);
    log = nl == std::string_view::npos ? std::string_view{} : log.substr(nl + 1);
    if (!line.starts_with("ptxas")) continue;

    if (auto name = quoted_after(line, "Compiling entry function")) {
      kernels.push_back(kernel_resources{.name = std::string(*name)});
      in_entry_properties = false;
      continue;
    }
    if (kernels.empty()) continue;
    auto& k = kernels.back();
    if (const auto at = line.find("Function properties for "); at != std::string_view::npos) {
      in_entry_properties = line.substr(at + 24) == k.name;
      continue;
    }
    if (in_entry_properties) {
      if (auto v = number_before(line, "bytes spill stores")) k.spill_stores_bytes = *v;
      if (auto v = number_before(line, "bytes spill loads")) k.spill_loads_bytes = *v;
      if (auto v = number_before(line, "bytes stack frame")) k.stack_frame_bytes = *v;
    }
    if (line.find("Used ") != std::string_view::npos) {
      if (auto v = number_before(line, "registers")) k.registers = *v;
      if (auto v = number_before(line, "bytes smem")) k.static_smem_bytes = *v;
    }
  }
  return kernels;
}

compile_report to_report(const compiled& c) {
  compile_report r{.seconds = c.cache_hit ? 0.0 : c.seconds, .cache_hit = c.cache_hit};
  for (const auto& k : c.kernels) {
    r.registers = std::max(r.registers, k.registers);
    r.spill_bytes = std::max(r.spill_bytes, k.spill_stores_bytes + k.spill_loads_bytes);
    r.static_smem_bytes = std::max(r.static_smem_bytes, k.static_smem_bytes);
  }
  return r;
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
