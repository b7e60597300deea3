#pragma once
/// Stored references: a task's inputs and reference outputs, computed once
/// by an importer and kept in a file beside the task, in place of a reference
/// kernel. A task names one with `"reference": {"stored": "x.specref"}`
/// (docs/task-format.md); the importer for KernelBench problems writes them
/// (docs/kernelbench.md, which also describes the format).
///
/// @code
///   auto ref = specgen::stored_reference::open("tasks/L1_19_ReLU.specref");
///   if (!ref) return ref.error();                        // names the file and the JSON pointer
///   if (auto ok = ref->check(task); !ok) return ok.error();  // holds every buffer of every shape?
///   for (std::size_t i : ref->cases_at(task.validation_shapes[0])) {
///     auto x = ref->read(ref->cases()[i].inputs.at("x"));  // the bytes, checksum verified
///   }
/// @endcode
///
/// The file: 8 bytes `SPECREF1`, the header's length as a little-endian
/// uint64, the header (JSON), then the buffers, each at an offset that is a
/// multiple of 64, row-major in the buffer's dtype, with an XXH3-64 checksum
/// in the header. Opening reads the header only; every `read` checks its
/// buffer's checksum, so a damaged file is an error, never a wrong verdict.
#include <specgen/detail/config.hpp>
#include <specgen/detail/files.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/detail/xxh3.hpp>
#include <specgen/expected.hpp>
#include <specgen/inputs.hpp>
#include <specgen/task.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

SPECGEN_BEGIN_NAMESPACE

/// Where one stored buffer's bytes lie in the file, and their checksum.
struct stored_blob {
  std::uint64_t offset = 0;  ///< from the start of the file, a multiple of 64
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;    ///< XXH3-64 (seed 0) of the bytes
  friend bool operator==(const stored_blob&, const stored_blob&) = default;
};

/// One stored case: a shape, every input of the task and the reference's
/// outputs on them.
struct stored_case {
  shape_binding shape{};
  std::uint64_t seed = 0;  ///< the seed the importer drew the inputs with
  std::string what{};      ///< how the inputs were drawn, for verdicts ("seed 2, float inputs uniform(-1, 1)")
  std::map<std::string, stored_blob> inputs{};   ///< by task input name
  std::map<std::string, stored_blob> outputs{};  ///< by task output name
  /// By float output name, optional: the reference on the absolute values of
  /// every float input, the magnitude `T` of a tolerance's `terms` allowance
  /// (docs/validation-math.md). An output without one is judged by abs/rel alone.
  std::map<std::string, stored_blob> terms{};
};

/// A case's bytes, for `stored_reference::write`.
struct stored_case_data {
  shape_binding shape{};
  std::uint64_t seed = 0;
  std::string what{};
  std::map<std::string, std::vector<std::byte>> inputs{};
  std::map<std::string, std::vector<std::byte>> outputs{};
  std::map<std::string, std::vector<std::byte>> terms{};
};

/// A stored-reference file, its header read and checked. Copyable; `read`
/// opens the file each time.
class stored_reference {
 public:
  static constexpr std::string_view magic = "SPECREF1";
  static constexpr std::string_view format_name = "specgen-stored-reference";
  static constexpr int version = 1;
  /// The largest header read: a header lists buffers, never holds them.
  static constexpr std::uint64_t max_header_bytes = 64u << 20;

  /// Reads and checks the header of `path`: the magic, the format and
  /// version, every case's fields, and that every buffer lies inside the
  /// file, 64-byte aligned, after the header, overlapping no other.
  static expected<stored_reference, error> open(const std::filesystem::path& path) noexcept {
    const std::string file = path.string();
    try {
      auto f = detail::open_regular_file(path, kind);
      if (!f) return unexpected(detail::file_error(file, "", f.error().message));
      char head[16];
      if (f->size < sizeof head || !read_at(f->fd.get(), head, sizeof head, 0))
        return unexpected(detail::file_error(file, "", "too short for a stored reference (no header)"));
      if (std::string_view(head, 8) != magic)
        return unexpected(detail::file_error(
            file, "", fmt::format("not a stored reference: it does not start with \"{}\"", magic)));
      std::uint64_t header_bytes = 0;
      for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<unsigned char>(head[8 + i]);
      if (header_bytes > max_header_bytes || header_bytes > f->size - sizeof head)
        return unexpected(detail::file_error(
            file, "", fmt::format("the header's length ({} bytes) runs past the end of the file ({} bytes) or over "
                                  "the limit of {}",
                                  header_bytes, f->size, detail::byte_text(max_header_bytes))));
      std::string text(static_cast<std::size_t>(header_bytes), '\0');
      if (!read_at(f->fd.get(), text.data(), text.size(), sizeof head))
        return unexpected(detail::file_error(file, "", fmt::format("cannot read the header: {}", std::strerror(errno))));
      auto j = detail::parse_json(text, file, false);
      if (!j) return unexpected(j.error());
      stored_reference out;
      out.path_ = path;
      out.file_bytes_ = f->size;
      out.data_start_ = sizeof head + header_bytes;
      try {
        out.read_header(*j);
      } catch (const detail::json_read_error& e) {
        return unexpected(e.at(file));
      }
      if (auto ok = out.check_layout(); !ok) return unexpected(ok.error());
      return out;
    } catch (const std::exception& e) {
      return unexpected(detail::file_error(file, "", fmt::format("cannot read the stored reference: {}", e.what())));
    }
  }

  /// Writes a stored reference for task `task_name` holding `cases`, in the
  /// format `open` reads (for references computed by code of one's own; the
  /// KernelBench importer writes the same format from Python). `producer` is
  /// kept as it is, to say what computed the outputs.
  static expected<void, error> write(const std::filesystem::path& path, std::string_view task_name,
                                     const std::vector<stored_case_data>& cases,
                                     const nlohmann::json& producer = nlohmann::json::object()) noexcept {
    const std::string file = path.string();
    try {
      // Offsets depend on the header's length, which depends on the offsets'
      // digits: lay the buffers out after a header of a guessed length and
      // grow the guess until the header fits.
      std::uint64_t reserved = 4096;
      for (;;) {
        nlohmann::json list = nlohmann::json::array();
        std::vector<const std::vector<std::byte>*> order;
        std::uint64_t at = align(16 + reserved);
        for (const auto& c : cases) {
          nlohmann::json one{{"shape", c.shape}, {"seed", c.seed}, {"what", c.what}};
          for (const auto& [key, m] : {std::pair<const char*, const std::map<std::string, std::vector<std::byte>>&>{"inputs", c.inputs},
                                       {"outputs", c.outputs},
                                       {"terms", c.terms}}) {
            if (m.empty() && std::string_view(key) == "terms") continue;
            nlohmann::json blobs = nlohmann::json::object();
            for (const auto& [name, bytes] : m) {
              blobs[name] = {{"offset", at}, {"bytes", bytes.size()},
                             {"xxh3", fmt::format("{:016x}", detail::xxh3_64(bytes.data(), bytes.size()))}};
              order.push_back(&bytes);
              at = align(at + bytes.size());
            }
            one[key] = std::move(blobs);
          }
          list.push_back(std::move(one));
        }
        const std::string header = nlohmann::json{{"format", format_name}, {"version", version}, {"task", task_name},
                                                  {"producer", producer}, {"cases", std::move(list)}}
                                       .dump();
        if (header.size() > reserved) {
          reserved = header.size() + header.size() / 8 + 64;
          continue;
        }
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        if (!out) return unexpected(detail::file_error(file, "", fmt::format("cannot create the file: {}", std::strerror(errno))));
        std::string head(magic);
        for (int i = 0; i < 8; ++i) head.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xffu));
        out << head << header;
        std::uint64_t written = 16 + header.size();
        auto pad_to = [&](std::uint64_t offset) {
          const std::string zeros(static_cast<std::size_t>(offset - written), '\0');
          out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
          written = offset;
        };
        std::uint64_t next = align(16 + reserved);
        for (const auto* bytes : order) {
          pad_to(next);
          out.write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
          written += bytes->size();
          next = align(written);
        }
        out.flush();
        if (!out) return unexpected(detail::file_error(file, "", fmt::format("cannot write the file: {}", std::strerror(errno))));
        return {};
      }
    } catch (const std::exception& e) {
      return unexpected(detail::file_error(file, "", fmt::format("cannot write the stored reference: {}", e.what())));
    }
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] const std::string& task_name() const noexcept { return task_; }
  [[nodiscard]] const std::vector<stored_case>& cases() const noexcept { return cases_; }
  /// What wrote the file (the importer's free-form object), as JSON text.
  [[nodiscard]] const std::string& producer() const noexcept { return producer_; }
  [[nodiscard]] std::uint64_t file_bytes() const noexcept { return file_bytes_; }

  /// The indices of the cases at `shape`, in file order.
  [[nodiscard]] std::vector<std::size_t> cases_at(const shape_binding& shape) const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < cases_.size(); ++i)
      if (cases_[i].shape == shape) out.push_back(i);
    return out;
  }

  /// Whether the file serves `t`: the task's name, and every case at a shape
  /// of the task holding exactly the task's inputs and outputs at the sizes
  /// the shape gives (terms only for float outputs); every validation shape
  /// and the benchmark shape have at least one case.
  [[nodiscard]] expected<void, error> check(const task& t) const {
    const std::string file = path_.string();
    auto fail = [&](std::string pointer, std::string problem) {
      return unexpected(detail::file_error(file, pointer, std::move(problem)));
    };
    if (task_ != t.name)
      return fail("/task", fmt::format("the stored reference is for task '{}', not '{}'", task_, t.name));
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      const stored_case& c = cases_[i];
      const std::string at = fmt::format("/cases/{}", i);
      const bool known = c.shape == t.benchmark_shape ||
                         std::find(t.validation_shapes.begin(), t.validation_shapes.end(), c.shape) != t.validation_shapes.end();
      if (!known)
        return fail(at + "/shape", fmt::format("shape {} is neither the task's benchmark shape nor one of its "
                                               "validation shapes",
                                               detail::binding_text(c.shape)));
      auto buffers = [&](const std::vector<tensor_spec>& specs, const std::map<std::string, stored_blob>& blobs,
                         std::string_view key, bool optional) -> expected<void, error> {
        for (const auto& [name, blob] : blobs)
          if (std::none_of(specs.begin(), specs.end(), [&](const tensor_spec& s) { return s.name == name; }))
            return fail(fmt::format("{}/{}/{}", at, key, detail::pointer_token(name)),
                        fmt::format("the task has no {} '{}'", key == "inputs" ? "input" : "output", name));
        for (const auto& s : specs) {
          auto it = blobs.find(s.name);
          if (it == blobs.end()) {
            if (optional) continue;
            return fail(fmt::format("{}/{}", at, key), fmt::format("holds no '{}'", s.name));
          }
          if (key == "terms" && !detail::is_float(s.type))
            return fail(fmt::format("{}/terms/{}", at, detail::pointer_token(s.name)),
                        fmt::format("'{}' is an integer output: it has no terms allowance", s.name));
          auto n = element_count(s, c.shape);
          if (!n) return fail(at + "/shape", n.error().message);
          const auto want = static_cast<std::uint64_t>(*n) * size_of(s.type);
          if (it->second.bytes != want)
            return fail(fmt::format("{}/{}/{}/bytes", at, key, detail::pointer_token(s.name)),
                        fmt::format("{} bytes; '{}' ({} {}) at {} needs {}", it->second.bytes, s.name,
                                    to_string(s.type), fmt::join(s.shape, " x "), detail::binding_text(c.shape), want));
        }
        return {};
      };
      if (auto ok = buffers(t.inputs, c.inputs, "inputs", false); !ok) return ok;
      if (auto ok = buffers(t.outputs, c.outputs, "outputs", false); !ok) return ok;
      if (auto ok = buffers(t.outputs, c.terms, "terms", true); !ok) return ok;
    }
    if (cases_at(t.benchmark_shape).empty())
      return fail("/cases", fmt::format("no case at the benchmark shape {}", detail::binding_text(t.benchmark_shape)));
    for (std::size_t i = 0; i < t.validation_shapes.size(); ++i)
      if (cases_at(t.validation_shapes[i]).empty())
        return fail("/cases", fmt::format("no case at validation shape {} ({})", i,
                                          detail::binding_text(t.validation_shapes[i])));
    return {};
  }

  /// The bytes of `blob`, read from the file, their checksum verified.
  [[nodiscard]] expected<std::vector<std::byte>, error> read(const stored_blob& blob) const noexcept {
    const std::string file = path_.string();
    try {
      auto f = detail::open_regular_file(path_, kind);
      if (!f) return unexpected(detail::file_error(file, "", f.error().message));
      if (f->size != file_bytes_)
        return unexpected(detail::file_error(
            file, "", fmt::format("the file changed since it was opened ({} bytes, now {})", file_bytes_, f->size)));
      std::vector<std::byte> out(static_cast<std::size_t>(blob.bytes));
      if (!read_at(f->fd.get(), out.data(), out.size(), blob.offset))
        return unexpected(detail::file_error(file, "", fmt::format("cannot read {} bytes at offset {}: {}", blob.bytes,
                                                                   blob.offset, std::strerror(errno))));
      if (const auto sum = detail::xxh3_64(out.data(), out.size()); sum != blob.xxh3)
        return unexpected(detail::file_error(
            file, "",
            fmt::format("the {} bytes at offset {} are damaged: their checksum is {:016x}, the header says {:016x}",
                        blob.bytes, blob.offset, sum, blob.xxh3)));
      return out;
    } catch (const std::exception& e) {
      return unexpected(detail::file_error(file, "", fmt::format("cannot read {} bytes: {}", blob.bytes, e.what())));
    }
  }

 private:
  /// Opened as a regular file (never a FIFO or device); any size.
  static constexpr detail::file_kind kind{"stored reference", ~std::size_t{0}};

  static constexpr std::uint64_t align(std::uint64_t n) noexcept { return (n + 63) / 64 * 64; }

  static bool read_at(int fd, void* into, std::size_t n, std::uint64_t offset) noexcept {
    auto* p = static_cast<char*>(into);
    while (n > 0) {
      const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        if (got == 0) errno = EIO;  // the file ended early
        return false;
      }
      p += got;
      n -= static_cast<std::size_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
    return true;
  }

  static stored_blob read_blob(const nlohmann::json& j) {
    using detail::json_read_error;
    if (!j.is_object()) throw json_read_error({}, detail::wrong_type_problem("an object {\"offset\", \"bytes\", \"xxh3\"}", j));
    const std::initializer_list<std::string_view> known{"offset", "bytes", "xxh3"};
    if (auto k = detail::unknown_key(j, known))
      throw json_read_error("/" + detail::pointer_token(*k), detail::unknown_key_problem(*k, known));
    stored_blob b;
    b.offset = detail::required_key<std::uint64_t>(j, "offset");
    b.bytes = detail::required_key<std::uint64_t>(j, "bytes");
    const auto hex = detail::required_key<std::string>(j, "xxh3");
    const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), b.xxh3, 16);
    if (hex.size() != 16 || ec != std::errc{} || end != hex.data() + hex.size())
      throw json_read_error("/xxh3", fmt::format("must be 16 hex digits, got \"{}\"", hex));
    return b;
  }

  void read_header(const nlohmann::json& j) {
    using detail::json_read_error;
    if (!j.is_object()) throw json_read_error({}, detail::wrong_type_problem("an object", j));
    const std::initializer_list<std::string_view> known{"format", "version", "task", "producer", "cases"};
    if (auto k = detail::unknown_key(j, known))
      throw json_read_error("/" + detail::pointer_token(*k), detail::unknown_key_problem(*k, known));
    if (auto f = detail::required_key<std::string>(j, "format"); f != format_name)
      throw json_read_error("/format", fmt::format("is \"{}\", not \"{}\"", f, format_name));
    if (auto v = detail::required_key<int>(j, "version"); v != version)
      throw json_read_error("/version", fmt::format("version {} is not known here (this library reads version {})", v,
                                                    version));
    task_ = detail::required_key<std::string>(j, "task");
    if (const auto* p = detail::present(j, "producer")) producer_ = p->dump();
    detail::within(j, "cases", [&](const nlohmann::json& list) {
      if (!list.is_array()) throw json_read_error({}, detail::wrong_type_problem("an array of cases", list));
      for (std::size_t i = 0; i < list.size(); ++i)
        detail::nested_in(i, [&] {
          const nlohmann::json& c = list[i];
          const std::initializer_list<std::string_view> case_keys{"shape",  "seed",    "what",
                                                                             "inputs", "outputs", "terms"};
          if (auto k = detail::unknown_key(c, case_keys))
            throw json_read_error("/" + detail::pointer_token(*k), detail::unknown_key_problem(*k, case_keys));
          stored_case sc;
          sc.shape = detail::required_key<shape_binding>(c, "shape");
          detail::read_key(c, "seed", sc.seed);
          detail::read_key(c, "what", sc.what);
          auto blobs = [&](std::string_view key, bool required, std::map<std::string, stored_blob>& into) {
            if (!required && detail::present(c, key) == nullptr) return;
            detail::within(c, key, [&](const nlohmann::json& m) {
              if (!m.is_object()) throw json_read_error({}, detail::wrong_type_problem("an object of buffers", m));
              for (auto it = m.begin(); it != m.end(); ++it)
                detail::nested_in(it.key(), [&] { into[it.key()] = read_blob(it.value()); });
            });
          };
          blobs("inputs", true, sc.inputs);
          blobs("outputs", true, sc.outputs);
          blobs("terms", false, sc.terms);
          cases_.push_back(std::move(sc));
        });
    });
  }

  [[nodiscard]] expected<void, error> check_layout() const {
    struct span_at {
      std::uint64_t begin, end;
      std::string pointer;
    };
    std::vector<span_at> spans;
    for (std::size_t i = 0; i < cases_.size(); ++i)
      for (const auto& [key, m] : {std::pair<std::string_view, const std::map<std::string, stored_blob>&>{"inputs", cases_[i].inputs},
                                   {"outputs", cases_[i].outputs},
                                   {"terms", cases_[i].terms}})
        for (const auto& [name, b] : m) {
          const std::string at = fmt::format("/cases/{}/{}/{}", i, key, detail::pointer_token(name));
          auto fail = [&](std::string problem) { return unexpected(detail::file_error(path_.string(), at, std::move(problem))); };
          if (b.offset % 64 != 0) return fail(fmt::format("offset {} is not a multiple of 64", b.offset));
          if (b.offset < data_start_)
            return fail(fmt::format("offset {} lies inside the header (buffers start at {})", b.offset, data_start_));
          if (b.bytes > file_bytes_ || b.offset > file_bytes_ - b.bytes)
            return fail(fmt::format("{} bytes at offset {} run past the end of the file ({} bytes)", b.bytes, b.offset,
                                    file_bytes_));
          spans.push_back({b.offset, b.offset + b.bytes, at});
        }
    std::sort(spans.begin(), spans.end(), [](const span_at& a, const span_at& b) { return a.begin < b.begin; });
    for (std::size_t k = 1; k < spans.size(); ++k)
      if (spans[k].begin < spans[k - 1].end)
        return unexpected(detail::file_error(path_.string(), spans[k].pointer,
                                             fmt::format("overlaps the buffer at {}", spans[k - 1].pointer)));
    return {};
  }

  std::filesystem::path path_{};
  std::uint64_t file_bytes_ = 0;
  std::uint64_t data_start_ = 0;
  std::string task_{};
  std::string producer_{};
  std::vector<stored_case> cases_{};
};

SPECGEN_END_NAMESPACE
