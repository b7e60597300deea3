#include "disk_cache.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

namespace fs = std::filesystem;
constexpr int format_version = 1;

fs::path entry_path(const std::string& dir, const std::string& key, const char* ext) {
  return fs::path(dir) / key.substr(0, 2) / (key + ext);
}

bool write_atomically(const fs::path& path, const char* data, std::size_t size) {
  static std::atomic<unsigned> counter{0};
  const fs::path tmp = path.parent_path() / fmt::format(".{}.{}.{}.tmp", path.filename().string(),
                                                         static_cast<long>(::getpid()), counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data, static_cast<std::streamsize>(size));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return s;
}

bool is_elf(const std::string& bytes) { return bytes.size() >= 4 && bytes.compare(0, 4, "\x7f" "ELF") == 0; }

}  // namespace

std::shared_ptr<compiled> disk_cache::load(const std::string& key) const {
  const auto meta_text = read_file(entry_path(dir_, key, ".json"));
  if (!meta_text) return nullptr;
  const auto meta = nlohmann::json::parse(*meta_text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return nullptr;
  auto c = std::make_shared<compiled>();
  std::size_t cubin_bytes = 0;
  try {
    if (meta.at("format").get<int>() != format_version || meta.at("key").get<std::string>() != key) return nullptr;
    cubin_bytes = meta.at("cubin_bytes").get<std::size_t>();
    c->log = meta.at("log").get<std::string>();
    c->kernels = meta.at("kernels").get<std::vector<kernel_resources>>();
    c->seconds = meta.at("seconds").get<double>();
  } catch (const nlohmann::json::exception&) {
    return nullptr;  // damaged or from another format: recompiling is the repair
  }
  const auto cubin = read_file(entry_path(dir_, key, ".cubin"));
  if (!cubin || cubin->size() != cubin_bytes || !is_elf(*cubin)) return nullptr;
  const auto* p = reinterpret_cast<const std::byte*>(cubin->data());
  c->cubin.assign(p, p + cubin->size());
  c->cache_hit = true;
  c->key = key;
  return c;
}

void disk_cache::store(const compiled& c) const {
  std::error_code ec;
  const fs::path cubin_path = entry_path(dir_, c.key, ".cubin");
  fs::create_directories(cubin_path.parent_path(), ec);
  if (ec) return;
  if (!write_atomically(cubin_path, reinterpret_cast<const char*>(c.cubin.data()), c.cubin.size())) return;
  const nlohmann::json meta = {{"format", format_version}, {"key", c.key},         {"cubin_bytes", c.cubin.size()},
                               {"log", c.log},             {"kernels", c.kernels}, {"seconds", c.seconds}};
  const std::string text = meta.dump(2);
  write_atomically(entry_path(dir_, c.key, ".json"), text.data(), text.size());
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
