#include "run_op.hpp"

#include <specgen/expr.hpp>
#include <specgen/plan.hpp>
#include <specgen/task_io.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

using json = nlohmann::json;

/// A failed run as the response carries it.
struct failure {
  std::string kind;  // a runtime_error kind, or "invalid_request"
  std::string message;
  std::string cuda_error{};
};

failure from(const runtime_error& e) { return {std::string(to_string(e.what)), e.message, e.cuda_error}; }

struct slice {
  std::size_t offset = 0;
  std::size_t length = 0;
};

/// {"offset", "length"} inside a binary part of `size` bytes.
std::optional<failure> read_slice(const json& j, std::size_t size, const std::string& what, slice& out) {
  if (!j.is_object() || !j.contains("offset") || !j.contains("length") || !j["offset"].is_number_unsigned() ||
      !j["length"].is_number_unsigned())
    return failure{"invalid_request", fmt::format("{} needs unsigned \"offset\" and \"length\"", what)};
  out = {j["offset"].get<std::size_t>(), j["length"].get<std::size_t>()};
  if (out.offset > size || out.length > size - out.offset)
    return failure{"invalid_request", fmt::format("{} (offset {}, length {}) lies outside the {} binary bytes", what,
                                                  out.offset, out.length, size)};
  return std::nullopt;
}

/// Bytes of a task tensor at `shape`.
expected<std::size_t, failure> tensor_bytes(const tensor_spec& t, const shape_binding& shape) {
  std::int64_t elements = 1;
  for (const auto& dim : t.shape) {
    auto e = parse_size_expr(dim);
    if (!e) return unexpected(failure{"invalid_request", fmt::format("tensor {}: '{}': {}", t.name, dim, e.error().message)});
    auto v = e->eval(shape);
    if (!v || *v < 0)
      return unexpected(failure{"invalid_request", fmt::format("tensor {}: '{}' has no non-negative value at this shape",
                                                               t.name, dim)});
    elements *= *v;
  }
  return static_cast<std::size_t>(elements) * size_of(t.type);
}

json failed(const failure& f) {
  return {{"ok", false}, {"error_kind", f.kind}, {"message", f.message}, {"cuda_error", f.cuda_error}};
}

bool all_equal(const std::vector<std::byte>& bytes, std::byte value) {
  return std::all_of(bytes.begin(), bytes.end(), [&](std::byte b) { return b == value; });
}

struct named_buffer {
  std::string name;
  device_buffer buffer;
  std::span<const std::byte> uploaded{};  // inputs only
};

expected<json, failure> run(std::unique_ptr<gpu_context>& ctx, int device, const request& r, std::string& out_binary) {
  const json& a = r.args;
  if (!a.is_object() || !a.contains("task") || !a.contains("plan") || !a["plan"].is_string() || !a.contains("shape"))
    return unexpected(failure{"invalid_request", "run needs args {task, plan, shape, cubin, inputs}"});
  auto t = parse_task(a["task"], "<run request>");
  if (!t) return unexpected(failure{"invalid_request", t.error().what()});
  shape_binding shape;
  try {
    shape = a["shape"].get<shape_binding>();
  } catch (const json::exception& e) {
    return unexpected(failure{"invalid_request", fmt::format("shape must map size symbols to integers: {}", e.what())});
  }
  const std::size_t guard = a.value("guard", std::size_t{256});
  const auto guard_pattern = static_cast<std::byte>(a.value("guard_pattern", 0xA5));
  const auto poison = static_cast<std::byte>(a.value("poison", 0xFF));
  const auto deadline = std::chrono::duration_cast<duration>(std::chrono::duration<double, std::milli>(a.value("deadline_ms", 1000.0)));
  const std::span<const std::byte> binary(reinterpret_cast<const std::byte*>(r.binary.data()), r.binary.size());
  slice cubin;
  if (auto f = read_slice(a.value("cubin", json()), binary.size(), "cubin", cubin)) return unexpected(*f);

  if (!ctx) {
    auto c = gpu_context::create(device);
    if (!c) return unexpected(from(c.error()));
    ctx = std::move(*c);
  }
  auto plan = parse_plan(a["plan"].get<std::string>());
  if (!plan) return unexpected(failure{"invalid_plan", plan.error().what()});
  auto resolved = resolve(*plan, *t, shape, ctx->info().limits);
  if (!resolved) return unexpected(failure{"invalid_plan", resolved.error().what()});
  auto mod = ctx->load_module(binary.subspan(cubin.offset, cubin.length));
  if (!mod) return unexpected(from(mod.error()));

  std::vector<named_buffer> inputs, outputs;
  buffer_pointers pointers;
  const json given = a.value("inputs", json::array());
  for (const auto& spec : t->inputs) {
    auto it = std::find_if(given.begin(), given.end(), [&](const json& g) { return g.value("name", "") == spec.name; });
    if (it == given.end()) return unexpected(failure{"invalid_request", fmt::format("input '{}' was not sent", spec.name)});
    slice s;
    if (auto f = read_slice(*it, binary.size(), "input " + spec.name, s)) return unexpected(*f);
    auto bytes = tensor_bytes(spec, shape);
    if (!bytes) return unexpected(bytes.error());
    if (s.length != *bytes)
      return unexpected(failure{"invalid_request", fmt::format("input '{}' has {} bytes; the task's shape needs {}",
                                                               spec.name, s.length, *bytes)});
    auto b = ctx->allocate(*bytes, {.guard_bytes = guard});
    if (!b) return unexpected(from(b.error()));
    inputs.push_back({spec.name, std::move(*b), binary.subspan(s.offset, s.length)});
  }
  for (const auto& spec : t->outputs) {
    auto bytes = tensor_bytes(spec, shape);
    if (!bytes) return unexpected(bytes.error());
    auto b = ctx->allocate(*bytes, {.guard_bytes = guard});
    if (!b) return unexpected(from(b.error()));
    outputs.push_back({spec.name, std::move(*b), {}});
  }
  for (auto& in : inputs) {
    if (auto e = in.buffer.fill_guards(guard_pattern); !e) return unexpected(from(e.error()));
    if (auto e = in.buffer.upload(in.uploaded); !e) return unexpected(from(e.error()));
    pointers[in.name] = in.buffer.pointer();
  }
  for (auto& out : outputs) {
    if (auto e = out.buffer.fill_guards(guard_pattern); !e) return unexpected(from(e.error()));
    if (auto e = out.buffer.fill(poison); !e) return unexpected(from(e.error()));
    pointers[out.name] = out.buffer.pointer();
  }

  auto ran = ctx->run_plan(*resolved, *mod, pointers, deadline);
  if (!ran) return unexpected(from(ran.error()));

  bool guards_intact = true, inputs_intact = true;
  json broken = json::array();
  for (auto* list : {&inputs, &outputs})
    for (auto& nb : *list) {
      auto g = nb.buffer.read_guards();
      if (!g) return unexpected(from(g.error()));
      if (!all_equal((*g)[0], guard_pattern) || !all_equal((*g)[1], guard_pattern)) {
        guards_intact = false;
        broken.push_back(nb.name);
      }
    }
  json changed = json::array();
  for (auto& in : inputs) {
    auto now = in.buffer.download();
    if (!now) return unexpected(from(now.error()));
    if (now->size() != in.uploaded.size() || std::memcmp(now->data(), in.uploaded.data(), now->size()) != 0) {
      inputs_intact = false;
      changed.push_back(in.name);
    }
  }
  std::vector<std::string> wanted = a.value("outputs", std::vector<std::string>{});
  if (wanted.empty())
    for (const auto& o : outputs) wanted.push_back(o.name);
  json listed = json::array();
  for (const auto& name : wanted) {
    auto it = std::find_if(outputs.begin(), outputs.end(), [&](const named_buffer& o) { return o.name == name; });
    if (it == outputs.end())
      return unexpected(failure{"invalid_request", fmt::format("output '{}' is not an output of the task", name)});
    auto bytes = it->buffer.download();
    if (!bytes) return unexpected(from(bytes.error()));
    listed.push_back({{"name", name}, {"offset", out_binary.size()}, {"length", bytes->size()}});
    out_binary.append(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  }
  return json{{"ok", true},
              {"elapsed_ms", ran->elapsed_ms},
              {"guards_intact", guards_intact},
              {"guards_broken", broken},
              {"inputs_intact", inputs_intact},
              {"inputs_changed", changed},
              {"outputs", listed},
              {"device", {{"index", device}, {"name", ctx->info().name}, {"arch", ctx->info().arch}}}};
}

}  // namespace

run_outcome run_op(std::unique_ptr<gpu_context>& ctx, int device, const request& r) {
  std::string binary;
  auto result = run(ctx, device, r, binary);
  run_outcome out;
  out.reply.ok = true;  // the worker answered; whether the run succeeded is in the result
  if (result) {
    out.reply.result = std::move(*result);
    out.reply.binary = std::move(binary);
  } else {
    out.reply.result = failed(result.error());
  }
  out.must_exit = ctx && !ctx->usable();
  return out;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
