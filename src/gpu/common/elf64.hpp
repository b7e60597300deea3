#pragma once
// Bounds-checked reading of little-endian ELF64 images, the container of
// every cubin: the section headers with their names, and symbol tables. Every
// offset, size and index read from an image is checked against the image
// before it is used, so a truncated or malformed image is an error message,
// never a read past its end. Host code only, no CUDA type.
//
// @code
//   auto img = elf64::read_image(cubin);
//   if (!img) return unexpected(img.error());
//   for (const auto& s : img->sections)
//     if (s.type == elf64::sht_symtab) auto symbols = elf64::read_symbols(*img, s);
// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail::elf64 {

// ELF64 constants and layout (the System V gABI); only what specgen reads.
inline constexpr std::size_t header_size = 64;
inline constexpr std::size_t section_header_size = 64;
inline constexpr std::size_t symbol_size = 24;
inline constexpr std::uint32_t sht_symtab = 2;
inline constexpr std::uint32_t sht_nobits = 8;
inline constexpr std::uint64_t shf_execinstr = 0x4;
inline constexpr std::uint16_t shn_undef = 0;
inline constexpr std::uint16_t shn_loreserve = 0xff00;  ///< section indices from here on are special
inline constexpr std::uint16_t shn_xindex = 0xffff;
inline constexpr unsigned stt_notype = 0;
inline constexpr unsigned stt_func = 2;
/// Far more sections and symbols than any cubin has: a bound on the work a hostile header can ask for.
inline constexpr std::uint64_t max_sections = 1u << 16;
inline constexpr std::uint64_t max_symbols = 1u << 20;

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
  [[nodiscard]] std::size_t size() const noexcept { return bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
};

/// One section header, its name resolved (a view into the image).
struct section {
  std::string_view name{};
  std::uint32_t type = 0;
  std::uint64_t flags = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t link = 0;
  std::uint32_t info = 0;
  std::uint64_t entsize = 0;
  /// NOBITS sections (.nv.shared.*, .nv.global) occupy no bytes of the file.
  [[nodiscard]] bool in_file() const noexcept { return type != sht_nobits; }
};

/// One symbol table entry, its name resolved (a view into the image).
struct symbol {
  std::string_view name{};
  std::uint8_t info = 0;    ///< binding << 4 | type
  std::uint8_t other = 0;   ///< visibility in the low bits; CUDA keeps its own flags above them
  std::uint16_t shndx = 0;  ///< the section it is defined in; shn_undef: undefined
  std::uint64_t value = 0;
  std::uint64_t size = 0;
  [[nodiscard]] unsigned type() const noexcept { return info & 0xfu; }
  [[nodiscard]] unsigned binding() const noexcept { return info >> 4; }
  /// Whether `shndx` names a section of the image (not undefined, not a special index).
  [[nodiscard]] bool defined_in(std::size_t section_count) const noexcept {
    return shndx != shn_undef && shndx < shn_loreserve && shndx < section_count;
  }
};

/// An image whose header and section headers passed every check: each
/// section that occupies file bytes lies inside the image, and every name
/// lies inside the name table. Views into the image: it must outlive this.
struct image {
  reader bytes;
  std::vector<section> sections{};
};

/// Reads the ELF header and the section headers of `bytes`.
inline expected<image> read_image(std::span<const std::byte> bytes) {
  const auto fail = [](std::string why) { return unexpected(error{std::move(why)}); };
  const reader r(bytes);
  if (bytes.size() < header_size) return fail(fmt::format("{} bytes are too few for an ELF64 header", bytes.size()));
  constexpr std::array<std::uint8_t, 4> magic{0x7f, 'E', 'L', 'F'};
  for (std::size_t i = 0; i < magic.size(); ++i)
    if (std::to_integer<std::uint8_t>(bytes[i]) != magic[i]) return fail("not an ELF image (no \\x7fELF magic)");
  if (std::to_integer<std::uint8_t>(bytes[4]) != 2) return fail("not a 64-bit ELF image");
  if (std::to_integer<std::uint8_t>(bytes[5]) != 1) return fail("not a little-endian ELF image");

  const std::uint64_t shoff = *r.at<std::uint64_t>(0x28);  // inside the header, checked above
  const std::uint16_t shentsize = *r.at<std::uint16_t>(0x3a);
  std::uint64_t shnum = *r.at<std::uint16_t>(0x3c);
  std::uint64_t shstrndx = *r.at<std::uint16_t>(0x3e);
  if (shoff == 0) return fail("the ELF image has no section headers");
  if (shentsize != section_header_size)
    return fail(fmt::format("section headers of {} bytes, not {}", shentsize, section_header_size));
  if (!r.holds(shoff, section_header_size)) return fail("the section headers lie outside the image");

  const auto header_at = [&r, shoff](std::uint64_t i) {  // i < shnum, whose headers lie inside the image
    const std::uint64_t at = shoff + i * section_header_size;
    return std::pair{*r.at<std::uint32_t>(at),
                     section{.type = *r.at<std::uint32_t>(at + 4),
                             .flags = *r.at<std::uint64_t>(at + 8),
                             .offset = *r.at<std::uint64_t>(at + 24),
                             .size = *r.at<std::uint64_t>(at + 32),
                             .link = *r.at<std::uint32_t>(at + 40),
                             .info = *r.at<std::uint32_t>(at + 44),
                             .entsize = *r.at<std::uint64_t>(at + 56)}};
  };
  // Extended numbering: counts that do not fit 16 bits are in section 0.
  const auto first = header_at(0).second;
  if (shnum == 0) shnum = first.size;
  if (shstrndx == shn_xindex) shstrndx = first.link;
  if (shnum > max_sections) return fail(fmt::format("{} sections: not a cubin", shnum));
  if (!r.holds(shoff, shnum * section_header_size))
    return fail(fmt::format("{} section headers do not fit the image", shnum));
  if (shstrndx == shn_undef || shstrndx >= shnum) return fail("no section name table");

  image img{.bytes = r};
  std::vector<std::uint32_t> name_offsets;
  img.sections.reserve(static_cast<std::size_t>(shnum));
  name_offsets.reserve(static_cast<std::size_t>(shnum));
  for (std::uint64_t i = 0; i < shnum; ++i) {
    auto [name, s] = header_at(i);
    name_offsets.push_back(name);
    img.sections.push_back(s);
  }
  const section names = img.sections[static_cast<std::size_t>(shstrndx)];
  if (!names.in_file() || !r.holds(names.offset, names.size))
    return fail("the section name table lies outside the image");
  for (std::size_t i = 0; i < img.sections.size(); ++i) {
    auto& s = img.sections[i];
    auto name = r.string(names.offset, names.size, name_offsets[i]);
    if (!name) return fail(fmt::format("a section name at {} lies outside the name table", name_offsets[i]));
    s.name = *name;
    if (s.in_file() && !r.holds(s.offset, s.size)) return fail(fmt::format("section '{}' lies outside the image", s.name));
  }
  return img;
}

/// The entries of symbol table `table` (a section of `img` of type
/// sht_symtab), in table order, index 0 included, so that an index read
/// elsewhere in the image selects the same entry.
inline expected<std::vector<symbol>> read_symbols(const image& img, const section& table) {
  const auto fail = [](std::string why) { return unexpected(error{std::move(why)}); };
  if (table.entsize != symbol_size || table.size % symbol_size != 0) return fail("a symbol table with odd entries");
  if (table.link >= img.sections.size()) return fail("a symbol table without its string table");
  const section& strings = img.sections[table.link];
  if (!strings.in_file()) return fail("a symbol string table lies outside the image");
  const std::uint64_t count = table.size / symbol_size;
  if (count > max_symbols) return fail(fmt::format("{} symbols: not a cubin", count));
  const reader& r = img.bytes;
  std::vector<symbol> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t at = table.offset + i * symbol_size;  // inside the table, which read_image checked
    symbol s{.info = *r.at<std::uint8_t>(at + 4),
             .other = *r.at<std::uint8_t>(at + 5),
             .shndx = *r.at<std::uint16_t>(at + 6),
             .value = *r.at<std::uint64_t>(at + 8),
             .size = *r.at<std::uint64_t>(at + 16)};
    const auto st_name = *r.at<std::uint32_t>(at);
    if (st_name != 0) {
      auto name = r.string(strings.offset, strings.size, st_name);
      if (!name) return fail(fmt::format("a symbol name at {} lies outside its string table", st_name));
      s.name = *name;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace gpu::detail::elf64
SPECGEN_END_NAMESPACE
