#include "cubin_info.hpp"

#include "gpu/common/elf64.hpp"

#include <algorithm>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

bool is_global_section(std::string_view name) noexcept {
  return name == ".nv.global" || name.starts_with(".nv.global.");
}

expected<cubin_info> inspect_cubin(std::span<const std::byte> bytes) {
  auto img = elf64::read_image(bytes);  // every section checked against the image
  if (!img) return unexpected(img.error());
  cubin_info info;
  for (const auto& s : img->sections)
    if (is_global_section(s.name) && s.size > 0) {
      info.global_sections.emplace_back(s.name);
      info.global_bytes += s.size;
    }
  // The device heap: undefined function symbols of the symbol table(s).
  for (const auto& s : img->sections) {
    if (s.type != elf64::sht_symtab) continue;
    auto symbols = elf64::read_symbols(*img, s);
    if (!symbols) return unexpected(symbols.error());
    for (const auto& sym : *symbols) {
      const unsigned kind = sym.type();
      if (sym.shndx != elf64::shn_undef || (kind != elf64::stt_func && kind != elf64::stt_notype)) continue;
      if (sym.name == "malloc" || sym.name == "free" || sym.name == "__nv_aligned_device_malloc")
        if (std::find(info.heap_functions.begin(), info.heap_functions.end(), sym.name) == info.heap_functions.end())
          info.heap_functions.emplace_back(sym.name);
    }
  }
  return info;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
