// The kernels of a cubin and their resources, read from the cubin itself.
// What a cubin holds, as NVRTC 12 and 13 write it (sm_75 to sm_121 checked):
// - each entry function is an STT_FUNC symbol whose st_other carries the
//   CUDA entry flag (0x10), defined in its own executable section
//   `.text.<name>`; non-inlined device functions are STT_FUNC symbols without
//   the flag. The name is the entry point's: plain for extern "C", mangled
//   otherwise, as ptxas reports it;
// - `.nv.info` sections (SHT_LOPROC) hold attributes: a format byte, an
//   attribute byte and a 16-bit field, then, for format 4 (EIFMT_SVAL), that
//   many bytes of value; formats 1 (no value), 2 (a byte) and 3 (16 bits)
//   keep their value in the 16-bit field. EIATTR_REGCOUNT (0x2f) and
//   EIATTR_FRAME_SIZE (0x11) are format 4: a symbol index, then the register
//   count per thread or the stack frame in bytes. NVRTC 13 writes them into
//   the module's `.nv.info`, older toolkits into `.nv.info.<name>`: every
//   `.nv.info*` section is read;
// - static shared memory is the size of the NOBITS section
//   `.nv.shared.<name>`. From sm_90 on that section also spans the shared
//   memory the system reserves per block (1 KiB), which ptxas does not count
//   as the kernel's: such cubins name `.nv.reservedSmem.*` symbols, and
//   `.nv.reservedSmem.cap` (sm_100 on) holds the reserved size.
#include <specgen/gpu/compiler.hpp>

#include "gpu/common/elf64.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <map>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {
namespace {

namespace elf64 = detail::elf64;

constexpr std::uint32_t sht_cuda_info = 0x70000000;  // SHT_LOPROC: `.nv.info*`
constexpr std::uint8_t sto_cuda_entry = 0x10;
constexpr std::uint8_t eifmt_sval = 0x04;
constexpr std::uint8_t eiattr_frame_size = 0x11;
constexpr std::uint8_t eiattr_regcount = 0x2f;
/// What sm_90 reserves per block where the cubin does not say (no `.nv.reservedSmem.cap`).
constexpr std::uint64_t default_reserved_smem = 1024;

}  // namespace

expected<std::vector<kernel_resources>> read_cubin_kernels(std::span<const std::byte> cubin) {
  const auto fail = [](std::string why) { return unexpected(error{fmt::format("unreadable cubin: {}", why)}); };
  auto img = elf64::read_image(cubin);
  if (!img) return fail(img.error().message);
  const auto& sections = img->sections;

  const auto symtab = std::find_if(sections.begin(), sections.end(),
                                   [](const elf64::section& s) { return s.type == elf64::sht_symtab; });
  if (symtab == sections.end()) return fail("no symbol table");
  auto symbols = elf64::read_symbols(*img, *symtab);
  if (!symbols) return fail(symbols.error().message);

  // The entry functions, in symbol table order; by symbol index for the attributes.
  std::vector<kernel_resources> kernels;
  std::map<std::uint32_t, std::size_t> entry_of_symbol;
  std::uint64_t reserved_smem = 0;
  for (std::size_t i = 0; i < symbols->size(); ++i) {
    const auto& sym = (*symbols)[i];
    if (sym.name.starts_with(".nv.reservedSmem")) {
      reserved_smem = std::max(reserved_smem, default_reserved_smem);
      if (sym.name == ".nv.reservedSmem.cap") reserved_smem = sym.value;
    }
    if (sym.type() != elf64::stt_func || (sym.other & sto_cuda_entry) == 0 || sym.name.empty() ||
        !sym.defined_in(sections.size()) || (sections[sym.shndx].flags & elf64::shf_execinstr) == 0)
      continue;
    entry_of_symbol.emplace(static_cast<std::uint32_t>(i), kernels.size());
    kernels.push_back(kernel_resources{.name = std::string(sym.name)});
  }
  if (reserved_smem > INT_MAX) return fail(fmt::format("{} bytes of reserved shared memory", reserved_smem));

  const elf64::reader& r = img->bytes;
  for (const auto& s : sections) {
    if (s.type != sht_cuda_info || !s.name.starts_with(".nv.info")) continue;
    const std::uint64_t end = s.offset + s.size;  // inside the image: read_image checked it
    for (std::uint64_t at = s.offset; at < end;) {
      if (end - at < 4) return fail(fmt::format("an attribute of '{}' is cut short", s.name));
      const auto format = *r.at<std::uint8_t>(at);
      const auto attribute = *r.at<std::uint8_t>(at + 1);
      const auto field = *r.at<std::uint16_t>(at + 2);
      at += 4;
      if (format < 1 || format > eifmt_sval)
        return fail(fmt::format("attribute {:#x} of '{}' has format {:#x}, which specgen does not know", attribute,
                                s.name, format));
      if (format != eifmt_sval) continue;  // the value is the 16-bit field
      if (field > end - at)
        return fail(fmt::format("attribute {:#x} of '{}' runs past the section's end", attribute, s.name));
      const std::uint64_t value_at = at;
      at += field;
      if (attribute != eiattr_regcount && attribute != eiattr_frame_size) continue;
      if (field < 8) return fail(fmt::format("attribute {:#x} of '{}' holds {} bytes, not 8", attribute, s.name, field));
      const auto symbol = *r.at<std::uint32_t>(value_at);
      const auto value = *r.at<std::uint32_t>(value_at + 4);
      if (symbol >= symbols->size())
        return fail(fmt::format("attribute {:#x} of '{}' names symbol {} of {}", attribute, s.name, symbol,
                                symbols->size()));
      const auto entry = entry_of_symbol.find(symbol);
      if (entry == entry_of_symbol.end()) continue;  // a device function's frame
      if (value > INT_MAX) return fail(fmt::format("attribute {:#x} of '{}' holds {}", attribute, s.name, value));
      auto& k = kernels[entry->second];
      (attribute == eiattr_regcount ? k.registers : k.stack_frame_bytes) = static_cast<int>(value);
    }
  }

  for (auto& k : kernels) {
    const std::string name = ".nv.shared." + k.name;
    const auto s = std::find_if(sections.begin(), sections.end(),
                                [&name](const elf64::section& c) { return c.name == name; });
    if (s == sections.end()) continue;
    const std::uint64_t bytes = s->size > reserved_smem ? s->size - reserved_smem : 0;
    if (bytes > INT_MAX) return fail(fmt::format("section '{}' of {} bytes", name, s->size));
    k.static_smem_bytes = static_cast<int>(bytes);
  }
  return kernels;
}

std::vector<kernel_resources> kernels_of_compile(std::span<const std::byte> cubin,
                                                 const std::vector<kernel_resources>& reported) {
  auto from_cubin = read_cubin_kernels(cubin);
  if (!from_cubin) return reported;
  for (auto& k : *from_cubin) {
    const auto same = std::find_if(reported.begin(), reported.end(),
                                   [&k](const kernel_resources& r) { return r.name == k.name; });
    if (same == reported.end()) continue;
    k.spill_stores_bytes = same->spill_stores_bytes;
    k.spill_loads_bytes = same->spill_loads_bytes;
    if (k.registers == 0) k.registers = same->registers;  // a cubin without EIATTR_REGCOUNT for it
  }
  return std::move(*from_cubin);
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
