#include "op_common.hpp"

#include "cubin_info.hpp"
#include "gpu/common/bounded_cache.hpp"

#include <specgen/detail/parallel.hpp>
#include <specgen/inputs.hpp>
#include <specgen/task_io.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <memory>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

using json = nlohmann::json;

failure from(const runtime_error& e) { return {std::string(to_string(e.what)), e.message, e.cuda_error}; }
failure bad_request(std::string message) { return {"invalid_request", std::move(message)}; }

json failed(const failure& f) {
  json out = {{"ok", false}, {"error_kind", f.kind}, {"message", f.message}, {"cuda_error", f.cuda_error}};
  if (!f.module_key.empty()) out["module_key"] = f.module_key;
  return out;
}

std::span<const std::byte> binary_of(const request& r) {
  return {reinterpret_cast<const std::byte*>(r.binary.data()), r.binary.size()};
}

expected<std::span<const std::byte>, failure> read_slice(const json& j, std::span<const std::byte> binary,
                                                         const std::string& what) {
  if (!j.is_object() || !j.contains("offset") || !j.contains("length") || !j["offset"].is_number_unsigned() ||
      !j["length"].is_number_unsigned())
    return unexpected(bad_request(fmt::format("{} needs unsigned \"offset\" and \"length\"", what)));
  const auto offset = j["offset"].get<std::size_t>(), length = j["length"].get<std::size_t>();
  if (offset > binary.size() || length > binary.size() - offset)
    return unexpected(bad_request(fmt::format("{} (offset {}, length {}) lies outside the {} binary bytes", what, offset,
                                              length, binary.size())));
  return binary.subspan(offset, length);
}

expected<task, failure> read_task(const json& j) {
  auto t = parse_task(j, "<request>");
  if (!t) return unexpected(bad_request(t.error().what()));
  return std::move(*t);
}

expected<shape_binding, failure> read_shape(const json& j) {
  try {
    return j.get<shape_binding>();
  } catch (const json::exception& e) {
    return unexpected(bad_request(fmt::format("shape must map size symbols to integers: {}", e.what())));
  }
}

expected<duration, failure> read_ms(const json& args, const char* key, double fallback_ms) {
  const json v = args.value(key, json(fallback_ms));
  if (!v.is_number() || v.get<double>() < 0)
    return unexpected(bad_request(fmt::format("\"{}\" must be a non-negative number of milliseconds", key)));
  return std::chrono::duration_cast<duration>(std::chrono::duration<double, std::milli>(v.get<double>()));
}

expected<std::uint64_t, failure> read_u64(const json& args, const char* key, std::uint64_t fallback) {
  if (!args.contains(key)) return fallback;
  const json& v = args[key];
  if (!v.is_number_unsigned()) return unexpected(bad_request(fmt::format("\"{}\" must be an unsigned integer", key)));
  return v.get<std::uint64_t>();
}

expected<tensor_size, failure> size_at(const tensor_spec& t, const shape_binding& shape) {
  auto n = element_count(t, shape);
  if (!n) return unexpected(bad_request(n.error().message));
  return tensor_size{*n, static_cast<std::size_t>(*n) * size_of(t.type)};
}

expected<std::shared_ptr<loaded_module>, failure> acquire_module(worker_state& w, gpu_context& ctx, const json& where,
                                                          std::span<const std::byte> binary, const std::string& what) {
  std::string key;
  if (where.contains("module_key") && !where["module_key"].is_null()) {
    if (!where["module_key"].is_string() || where["module_key"].get<std::string>().empty())
      return unexpected(bad_request(fmt::format("{}: \"module_key\" must be a non-empty string", what)));
    key = where["module_key"].get<std::string>();
    if (auto* kept = w.modules.find(key)) return *kept;
  }
  if (!where.contains("cubin") || where["cubin"].is_null()) {
    if (key.empty()) return unexpected(bad_request(fmt::format("{} needs \"cubin\" or \"module_key\"", what)));
    return unexpected(failure{"module_missing",
                              fmt::format("{}: module '{}' is not loaded in this worker; send it again with its cubin",
                                          what, key),
                              {},
                              key});
  }
  auto cubin = read_slice(where["cubin"], binary, what + " cubin");
  if (!cubin) return unexpected(cubin.error());
  auto m = ctx.load_module(*cubin);
  if (!m) return unexpected(from(m.error()));
  auto shared = std::make_shared<loaded_module>(loaded_module{std::move(*m)});
  // State a kernel keeps in module globals would survive from run to run (and
  // from request to request): such a cubin gets a fresh instance per run. An
  // image the reader cannot read (PTX, a fatbin) is treated the same way.
  if (auto info = inspect_cubin(*cubin); !info || info->has_writable_globals())
    shared->fresh_cubin = std::make_shared<const std::vector<std::byte>>(cubin->begin(), cubin->end());
  if (!key.empty()) w.modules.put(key, shared);
  return shared;
}

// ---- io_set ---------------------------------------------------------------------------

expected<io_set, failure> io_set::allocate(gpu_context& ctx, const task& t, const shape_binding& shape,
                                           std::size_t guard, std::byte guard_pattern,
                                           std::optional<std::byte> poison) {
  io_set s;
  s.ctx_ = &ctx;
  s.guard_pattern_ = guard_pattern;
  s.poison_byte_ = poison;
  std::map<dtype, std::size_t> largest;
  for (auto* specs : {&t.inputs, &t.outputs})
    for (const auto& spec : *specs) {
      auto size = size_at(spec, shape);
      if (!size) return unexpected(size.error());
      auto b = ctx.allocate(size->bytes, {.guard_bytes = guard});
      if (!b) return unexpected(from(b.error()));
      (specs == &t.inputs ? s.inputs_ : s.outputs_).push_back({spec.name, spec.type, std::move(*b)});
      if (specs == &t.outputs) largest[spec.type] = std::max(largest[spec.type], size->bytes);
    }
  if (!poison)
    for (const auto& [type, bytes] : largest) {
      auto b = ctx.allocate(bytes);
      if (!b) return unexpected(from(b.error()));
      // One element uploaded, then doubled on the device (what is written so
      // far copied after itself): a benchmark-sized source costs microseconds,
      // not a pageable upload of its whole size.
      const auto pattern = poison_pattern(type);
      const std::size_t head = std::min(bytes, pattern.size());
      if (auto u = b->upload(std::span(pattern).first(head)); !u) return unexpected(from(u.error()));
      auto& st = context_access::state(ctx);
      for (std::size_t done = head; done < bytes;) {
        const std::size_t n = std::min(done, bytes - done);
        if (auto c = st.copy_async(b->pointer() + done, b->pointer(), n); !c) return unexpected(from(c.error()));
        done += n;
      }
      s.poison_sources_.emplace(type, std::move(*b));
    }
  return s;
}

buffer_pointers io_set::pointers() const {
  buffer_pointers p;
  for (const auto* list : {&inputs_, &outputs_})
    for (const auto& b : *list) p[b.name] = b.buffer.pointer();
  return p;
}

expected<void, failure> io_set::upload_input(std::size_t i, std::span<const std::byte> bytes) {
  auto& in = inputs_.at(i);
  if (bytes.size() != in.buffer.size())
    return unexpected(bad_request(
        fmt::format("input '{}' has {} bytes; the task's shape needs {}", in.name, bytes.size(), in.buffer.size())));
  if (auto u = in.buffer.upload(bytes); !u) return unexpected(from(u.error()));
  in.checksum = checksum(bytes);
  in.uploaded.reset();
  return {};
}

namespace {

/// A generated input, page-locked (cuMemHostRegister) once it is cached, so
/// every later upload of it runs at the bus's speed rather than a pageable
/// copy's.
struct generated_input {
  std::vector<std::byte> bytes;
  bool registered = false;

  generated_input() = default;
  generated_input(const generated_input&) = delete;
  generated_input& operator=(const generated_input&) = delete;
  ~generated_input() {
    if (!registered) return;
    if (const auto& api = load_driver(); api) (*api)->cuMemHostUnregister(bytes.data());
  }

  /// Best effort: unregistered memory is only slower.
  void pin() {
    const auto& api = load_driver();
    if (!registered && api && !bytes.empty())
      registered = (*api)->cuMemHostRegister(bytes.data(), bytes.size(), 0) == CUDA_SUCCESS;
  }
};

/// Generated inputs by (spec, elements, seed, distribution), least recently
/// used dropped beyond a byte budget ($SPECGEN_WORKER_INPUT_CACHE_MB, default
/// 4096). Validation and profiling of one task regenerate the same inputs for
/// every candidate; at a benchmark shape that is hundreds of milliseconds of
/// CPU per input. Only host memory: the device copy is uploaded (and
/// checksummed after the run) every time.
class input_cache {
 public:
  input_cache() : budget_(budget_from_env()), cache_({.max_bytes = budget_}) {}

  std::shared_ptr<generated_input> get(const tensor_spec& spec, std::int64_t elements, std::uint64_t seed,
                                       std::optional<distribution> dist, bool absolute) {
    std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}", spec.name, to_string(spec.type), fmt::join(spec.shape, ","),
                                  elements, seed, to_string(dist.value_or(spec.init)), absolute ? "abs" : "");
    if (auto* hit = cache_.find(key)) return *hit;
    auto made = std::make_shared<generated_input>();
    made->bytes.resize(static_cast<std::size_t>(elements) * size_of(spec.type));
    fill_parallel(spec, elements, seed, dist, made->bytes);
    if (absolute) make_absolute(made->bytes, spec.type);
    if (made->bytes.size() <= budget_) {  // one input over the budget is not kept at all
      if (made->bytes.size() >= pin_from_bytes) made->pin();
      cache_.put(std::move(key), made, made->bytes.size());
    }
    return made;
  }

 private:
  /// `fill_input` over slices on every core: the generator is counter-based,
  /// so the bytes are those of `make_input`.
  static void fill_parallel(const tensor_spec& spec, std::int64_t elements, std::uint64_t seed,
                            std::optional<distribution> dist, std::span<std::byte> out) {
    const std::size_t width = size_of(spec.type);
    specgen::detail::for_each_slice(static_cast<std::size_t>(elements), 0,
                                    [&](std::size_t, std::size_t first, std::size_t last) {
                                      fill_input(spec, elements, seed, dist, first,
                                                 out.subspan(first * width, (last - first) * width));
                                    });
  }

  /// Smaller inputs upload quickly anyway; pinning costs a system call each.
  static constexpr std::size_t pin_from_bytes = std::size_t{1} << 20;
  static std::size_t budget_from_env() {
    const char* env = std::getenv("SPECGEN_WORKER_INPUT_CACHE_MB");
    return (env ? std::strtoull(env, nullptr, 10) : 4096ull) << 20;
  }

  std::size_t budget_;
  bounded_cache<std::shared_ptr<generated_input>> cache_;  // by bytes
};

input_cache& generated_inputs() {
  static input_cache cache;  // the worker is single-threaded
  return cache;
}

}  // namespace

expected<void, failure> io_set::generate_input(std::size_t i, const tensor_spec& spec, std::uint64_t seed,
                                               std::optional<distribution> dist, bool absolute) {
  auto& in = inputs_.at(i);
  const auto elements = static_cast<std::int64_t>(in.buffer.size() / size_of(spec.type));
  auto g = generated_inputs().get(spec, elements, seed, dist, absolute);
  if (auto u = in.buffer.upload(g->bytes); !u) return unexpected(from(u.error()));
  in.uploaded = std::shared_ptr<const std::vector<std::byte>>(g, &g->bytes);
  return {};
}

expected<void, failure> io_set::fill_guards() {
  for (auto* list : {&inputs_, &outputs_})
    for (auto& b : *list)
      if (auto e = b.buffer.fill_guards(guard_pattern_); !e) return unexpected(from(e.error()));
  return {};
}

expected<void, failure> io_set::poison_outputs_async() {
  auto& s = context_access::state(*ctx_);
  for (auto& out : outputs_) {
    auto done = poison_byte_ ? s.memset_async(out.buffer.pointer(), static_cast<std::uint8_t>(*poison_byte_),
                                              out.buffer.size())
                             : s.copy_async(out.buffer.pointer(), poison_sources_.at(out.type).pointer(),
                                            out.buffer.size());
    if (!done) return unexpected(from(done.error()));
  }
  return {};
}

expected<void, failure> io_set::settle() {
  auto& s = context_access::state(*ctx_);
  if (auto u = s.require_usable(); !u) return unexpected(from(u.error()));
  if (auto r = s.check(s.api->cuCtxSynchronize(), runtime_error::kind::internal, "cuCtxSynchronize"); !r)
    return unexpected(from(r.error()));
  return {};
}

namespace {

/// Byte-for-byte equality, on every core for benchmark-sized buffers.
bool equal_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return false;
  std::vector<char> differs(std::thread::hardware_concurrency() + 1, 0);
  specgen::detail::for_each_slice(a.size(), 0, [&](std::size_t k, std::size_t first, std::size_t last) {
    differs[k] = std::memcmp(a.data() + first, b.data() + first, last - first) != 0;
  });
  return std::none_of(differs.begin(), differs.end(), [](char d) { return d != 0; });
}

}  // namespace

expected<run_check, failure> io_set::check() {
  run_check c;
  const auto intact = [&](const std::vector<std::byte>& g) {
    return std::all_of(g.begin(), g.end(), [&](std::byte b) { return b == guard_pattern_; });
  };
  for (auto* list : {&inputs_, &outputs_})
    for (auto& b : *list) {
      auto g = b.buffer.read_guards();
      if (!g) return unexpected(from(g.error()));
      if (!intact((*g)[0]) || !intact((*g)[1])) {
        c.guards_intact = false;
        c.guards_broken.push_back(b.name);
      }
    }
  auto& state = context_access::state(*ctx_);
  for (auto& in : inputs_) {
    auto now = state.staging(in.buffer.size());
    if (!now) return unexpected(from(now.error()));
    if (auto d = in.buffer.download_into(*now); !d) return unexpected(from(d.error()));
    const bool same = in.uploaded ? now->size() == in.uploaded->size() && equal_bytes(*now, *in.uploaded)
                                  : checksum(*now) == in.checksum;
    if (!same) {
      c.inputs_intact = false;
      c.inputs_changed.push_back(in.name);
    }
  }
  return c;
}

expected<json, failure> io_set::append_outputs(const std::vector<std::string>& names, reply_binary& out) {
  std::vector<std::string> wanted = names;
  if (wanted.empty())
    for (const auto& o : outputs_) wanted.push_back(o.name);
  std::vector<const io_buffer*> chosen;
  for (const auto& name : wanted) {
    auto it = std::find_if(outputs_.begin(), outputs_.end(), [&](const io_buffer& o) { return o.name == name; });
    if (it == outputs_.end()) return unexpected(bad_request(fmt::format("output '{}' is not an output of the task", name)));
    chosen.push_back(&*it);
  }
  auto& state = context_access::state(*ctx_);
  json listed = json::array();
  for (const io_buffer* o : chosen) {
    // Through page-locked staging: a pageable download runs at a fraction of the bus.
    auto staged = state.staging(o->buffer.size());
    if (!staged) return unexpected(from(staged.error()));
    if (auto d = o->buffer.download_into(*staged); !d) return unexpected(from(d.error()));
    listed.push_back({{"name", o->name}, {"offset", out.size()}, {"length", staged->size()}});
    out.append(*staged);
  }
  return listed;
}

void reply_binary::append(std::span<const std::byte> bytes) {
  if (in_region_ && bytes.size() > region_.size() - used_) {
    // It does not fit: what is in the region so far moves to the frame.
    frame_.assign(reinterpret_cast<const char*>(region_.data()), used_);
    in_region_ = false;
  }
  if (!in_region_) {
    frame_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return;
  }
  std::byte* to = region_.data() + used_;
  // Hundreds of MiB for a benchmark-sized output: one thread copies at a
  // fraction of the memory bandwidth (and takes the region's first-touch faults alone).
  specgen::detail::for_each_slice(bytes.size(), 0, [&](std::size_t, std::size_t first, std::size_t last) {
    std::memcpy(to + first, bytes.data() + first, last - first);
  });
  used_ += bytes.size();
}

response reply_binary::finish(json result) && {
  response r;
  r.ok = true;
  r.result = std::move(result);
  // Small parts stay in the frame: the region saves copies, not round trips.
  if (in_region_ && used_ >= bulk_threshold_bytes) r.bulk = used_;
  else if (in_region_ && used_ > 0) r.binary.assign(reinterpret_cast<const char*>(region_.data()), used_);
  else r.binary = std::move(frame_);
  return r;
}

void put_check(json& out, const run_check& c) {
  out["guards_intact"] = c.guards_intact;
  out["guards_broken"] = c.guards_broken;
  out["inputs_intact"] = c.inputs_intact;
  out["inputs_changed"] = c.inputs_changed;
}

json device_json(const gpu_context& ctx) {
  return {{"index", ctx.info().index}, {"name", ctx.info().name}, {"arch", ctx.info().arch}};
}

response reply_from(expected<json, failure> result, reply_binary binary) {
  // The worker answered: `ok` at the protocol level; whether the operation
  // succeeded is in the result.
  if (result) return std::move(binary).finish(std::move(*result));
  response out;
  out.ok = true;
  out.result = failed(result.error());
  return out;
}

expected<void, failure> load_inputs(io_set& io, const task& t, const nlohmann::json& given,
                                    std::span<const std::byte> binary) {
  using json = nlohmann::json;
  if (!given.is_array()) return unexpected(bad_request("\"inputs\" must be an array"));
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    const auto& spec = t.inputs[i];
    auto it = std::find_if(given.begin(), given.end(),
                           [&](const json& g) { return g.is_object() && g.value("name", "") == spec.name; });
    if (it == given.end()) return unexpected(bad_request(fmt::format("input '{}' was not sent", spec.name)));
    if (it->contains("seed")) {
      auto seed = read_u64(*it, "seed", 0);
      if (!seed) return unexpected(seed.error());
      std::optional<distribution> dist;
      if (it->contains("distribution") && !(*it)["distribution"].is_null()) {
        const json& d = (*it)["distribution"];
        if (!d.is_string())
          return unexpected(bad_request(fmt::format("input '{}': \"distribution\" must be a string, got {}", spec.name,
                                                    d.dump())));
        dist = parse_distribution(d.get<std::string>());
        if (!dist)
          return unexpected(bad_request(fmt::format("input '{}': {}", spec.name, distribution_error(d.get<std::string>()))));
      }
      const json absolute = it->value("abs", json(false));
      if (!absolute.is_boolean())
        return unexpected(bad_request(fmt::format("input '{}': \"abs\" must be true or false", spec.name)));
      if (auto g = io.generate_input(i, spec, *seed, dist, absolute.get<bool>()); !g) return g;
      continue;
    }
    auto bytes = read_slice(*it, binary, "input " + spec.name);
    if (!bytes) return unexpected(bytes.error());
    if (auto u = io.upload_input(i, *bytes); !u) return u;
  }
  return {};
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
