#include "cubin_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

// ELF64 constants and layout (the System V gABI); only what is read here.
constexpr std::size_t ehdr_size = 64;
constexpr std::size_t shdr_size = 64;
constexpr std::size_t sym_size = 24;
constexpr std::uint32_t sht_symtab = 2;
constexpr std::uint32_t sht_nobits = 8;
constexpr std::uint16_t shn_undef = 0;
constexpr std::uint16_t shn_xindex = 0xffff;
constexpr unsigned stt_func = 2;
constexpr unsigned stt_notype = 0;
/// Far more sections than any cubin has: a bound on the work a hostile header can ask for.
constexpr std::uint64_t max_sections = 1u << 16;
constexpr std::uint64_t max_symbols = 1u << 20;

/// Little-endian reads that fail instead of reading past the end.
class reader {
 public:
  explicit reader(std::span<const std::byte> b) : bytes_(b) {}
  template <class T>
  [[nodiscard]] std::optional<T> at(std::uint64_t offset) const {
    if (offset > bytes_.size() || sizeof(T) > bytes_.size() - offset) return std::nullopt;
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      v = static_cast<T>(v | (static_cast<T>(std::to_integer<std::uint8_t>(bytes_[offset + i])) << (8 * i)));
    return v;
  }
  /// Whether [offset, offset + length) lies inside the image.
  [[nodiscard]] bool holds(std::uint64_t offset, std::uint64_t length) const noexcept {
    return offset <= bytes_.size() && length <= bytes_.size() - offset;
  }
  /// The NUL-terminated string at `offset` inside the table [table, table + size).
  [[nodiscard]] std::optional<std::string_view> string(std::uint64_t table, std::uint64_t size,
                                                       std::uint64_t offset) const {
    if (!holds(table, size) || offset >= size) return std::nullopt;
    const auto* begin = reinterpret_cast<const char*>(bytes_.data() + table + offset);
    const auto* end = static_cast<const char*>(std::memchr(begin, '\0', static_cast<std::size_t>(size - offset)));
    if (!end) return std::nullopt;
    return std::string_view(begin, static_cast<std::size_t>(end - begin));
  }

 private:
  std::span<const std::byte> bytes_;
};

struct section {
  std::uint32_t name = 0;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t link = 0;
  std::uint64_t entsize = 0;
};

std::optional<section> section_at(const reader& r, std::uint64_t shoff, std::uint64_t i) {
  const std::uint64_t at = shoff + i * shdr_size;  // shoff and i are bounded: no overflow
  auto name = r.at<std::uint32_t>(at), type = r.at<std::uint32_t>(at + 4), link = r.at<std::uint32_t>(at + 40);
  auto offset = r.at<std::uint64_t>(at + 24), size = r.at<std::uint64_t>(at + 32);
  auto entsize = r.at<std::uint64_t>(at + 56);
  if (!name || !type || !link || !offset || !size || !entsize) return std::nullopt;
  return section{*name, *type, *offset, *size, *link, *entsize};
}

}  // namespace

bool is_global_section(std::string_view name) noexcept {
  return name == ".nv.global" || name.starts_with(".nv.global.");
}

expected<cubin_info, std::string> inspect_cubin(std::span<const std::byte> image) {
  const reader r(image);
  const auto fail = [](std::string why) { return unexpected(std::move(why)); };
  if (image.size() < ehdr_size) return fail(fmt::format("{} bytes are too few for an ELF64 header", image.size()));
  constexpr std::array<std::uint8_t, 4> magic{0x7f, 'E', 'L', 'F'};
  for (std::size_t i = 0; i < magic.size(); ++i)
    if (std::to_integer<std::uint8_t>(image[i]) != magic[i]) return fail("not an ELF image (no \\x7fELF magic)");
  if (std::to_integer<std::uint8_t>(image[4]) != 2) return fail("not a 64-bit ELF image");
  if (std::to_integer<std::uint8_t>(image[5]) != 1) return fail("not a little-endian ELF image");

  const std::uint64_t shoff = *r.at<std::uint64_t>(0x28);
  const std::uint16_t shentsize = *r.at<std::uint16_t>(0x3a);
  std::uint64_t shnum = *r.at<std::uint16_t>(0x3c);
  std::uint64_t shstrndx = *r.at<std::uint16_t>(0x3e);
  if (shoff == 0) return fail("the ELF image has no section headers");
  if (shentsize != shdr_size) return fail(fmt::format("section headers of {} bytes, not {}", shentsize, shdr_size));
  if (!r.holds(shoff, shdr_size)) return fail("the section headers lie outside the image");
  // Extended numbering: counts that do not fit 16 bits are in section 0.
  const auto first = section_at(r, shoff, 0);
  if (!first) return fail("the first section header lies outside the image");
  if (shnum == 0) shnum = first->size;
  if (shstrndx == shn_xindex) shstrndx = first->link;
  if (shnum > max_sections) return fail(fmt::format("{} sections: not a cubin", shnum));
  if (!r.holds(shoff, shnum * shdr_size)) return fail(fmt::format("{} section headers do not fit the image", shnum));
  if (shstrndx == shn_undef || shstrndx >= shnum) return fail("no section name table");

  std::vector<section> sections;
  sections.reserve(static_cast<std::size_t>(shnum));
  for (std::uint64_t i = 0; i < shnum; ++i) sections.push_back(*section_at(r, shoff, i));  // bounds checked above
  const section& names = sections[static_cast<std::size_t>(shstrndx)];
  if (!r.holds(names.offset, names.size)) return fail("the section name table lies outside the image");

  cubin_info info;
  for (const auto& s : sections) {
    auto name = r.string(names.offset, names.size, s.name);
    if (!name) return fail(fmt::format("a section name at {} lies outside the name table", s.name));
    // NOBITS sections (.nv.global) occupy no bytes of the file; others must fit it.
    if (s.type != sht_nobits && !r.holds(s.offset, s.size))
      return fail(fmt::format("section '{}' lies outside the image", *name));
    if (is_global_section(*name) && s.size > 0) {
      info.global_sections.emplace_back(*name);
      info.global_bytes += s.size;
    }
  }

  // The device heap: undefined function symbols of the symbol table(s).
  for (const auto& s : sections) {
    if (s.type != sht_symtab) continue;
    if (s.entsize != sym_size || s.size % sym_size != 0) return fail("a symbol table with odd entries");
    if (s.link >= shnum) return fail("a symbol table without its string table");
    const section& strings = sections[s.link];
    if (!r.holds(strings.offset, strings.size)) return fail("a symbol string table lies outside the image");
    const std::uint64_t count = s.size / sym_size;
    if (count > max_symbols) return fail(fmt::format("{} symbols: not a cubin", count));
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t at = s.offset + i * sym_size;  // inside the section, checked above
      const auto st_name = *r.at<std::uint32_t>(at);
      const auto st_info = *r.at<std::uint8_t>(at + 4);
      const auto st_shndx = *r.at<std::uint16_t>(at + 6);
      const unsigned kind = st_info & 0xfu;
      if (st_shndx != shn_undef || (kind != stt_func && kind != stt_notype) || st_name == 0) continue;
      auto name = r.string(strings.offset, strings.size, st_name);
      if (!name) return fail(fmt::format("a symbol name at {} lies outside its string table", st_name));
      if (*name == "malloc" || *name == "free" || *name == "__nv_aligned_device_malloc")
        if (std::find(info.heap_functions.begin(), info.heap_functions.end(), *name) == info.heap_functions.end())
          info.heap_functions.emplace_back(*name);
    }
  }
  return info;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
