#pragma once
/// Task files: JSON in, a checked `task` out, and back.
///
/// Everything a task file can get wrong is reported as an `error` naming
/// the file and the JSON pointer of the offending field, so a person can fix
/// it without reading this code. The schema is documented in docs/task-format.md.
///
/// @code
///   auto t = specgen::load_task("tasks/examples/softmax.json");
///   if (!t) { std::cerr << t.error().what() << '\n'; return 1; }
///   // e.g. "tasks/examples/softmax.json: /inputs/0/shape/1: unknown name 'K' (symbols: N, M)"
///   auto suite = specgen::load_suite("tasks/examples");   // every *.json, sorted by task name
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/detail/files.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/expected.hpp>
#include <specgen/expr.hpp>
#include <specgen/plan.hpp>
#include <specgen/stored_reference.hpp>
#include <specgen/task.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace detail {

/// A task file's error: the file ("<task>" for a task read from memory), the
/// JSON pointer of the field (e.g. "/inputs/2/shape/0"; "" for the whole file)
/// and what is wrong.
inline error task_failure(std::string file, std::string_view field, std::string message) {
  return file_error(file.empty() ? std::string("<task>") : std::move(file), field, std::move(message));
}

inline bool is_task_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_name_char(c) || c == '-' || c == '.'; });
}

/// An error for a whole file from a file helper's error, whose message
/// already starts with the file's name (or which names its file already).
inline error whole_file_error(const std::string& file, const error& e) {
  if (!e.file.empty()) return e;  // already names its file and JSON pointer
  std::string m = e.message;
  if (m.starts_with(file + ": ")) m.erase(0, file.size() + 2);
  return detail::task_failure(file, "", std::move(m));
}

/// Why `v` is not a value of a scalar of type `t`.
inline std::string scalar_value_error(const scalar_value& v, scalar_type t, scalar_errc e) {
  if (e == scalar_errc::not_integral)
    return fmt::format("{} is not an integer; type {} needs an integral value", v.to_string(), to_string(t));
  if (is_floating(v.type) && !std::isfinite(v.real)) return fmt::format("{} is not a finite number", v.to_string());
  return fmt::format("{} is out of the range of {} ({})", v.to_string(), to_string(t), range_text(t));
}

/// Reads the JSON shape of a task; the meaning is checked by `validate_task`.
class task_reader {
 public:
  task_reader(std::string file, std::filesystem::path dir) : file_(std::move(file)), dir_(std::move(dir)) {}

  expected<task, error> read(const nlohmann::json& j) {
    task t;
    t.file = file_;
    if (auto e = keys(j, "", {"name", "description", "symbols", "benchmark_shape", "validation_shapes", "inputs",
                              "outputs", "reference", "baseline", "compile_options", "scalars", "distributions"},
                      {"name", "description", "symbols", "benchmark_shape", "validation_shapes", "outputs",
                       "reference"}))
      return unexpected(std::move(*e));
    if (auto e = string(j["name"], "/name", t.name)) return unexpected(std::move(*e));
    if (auto e = text(j["description"], "/description", t.description)) return unexpected(std::move(*e));
    if (auto e = strings(j["symbols"], "/symbols", t.symbols)) return unexpected(std::move(*e));
    if (auto e = binding(j["benchmark_shape"], "/benchmark_shape", t.benchmark_shape)) return unexpected(std::move(*e));
    const auto& shapes = j["validation_shapes"];
    if (!shapes.is_array()) return unexpected(err("/validation_shapes", "must be an array of shapes like {\"N\": 1000}"));
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      t.validation_shapes.emplace_back();
      const std::string at = fmt::format("/validation_shapes/{}", i);
      // {"N": 1000}, or {"shape": {"N": 1000}, "inits": {"x": "normal(1000, 1)"}}.
      if (shapes[i].is_object() && shapes[i].contains("shape") && shapes[i]["shape"].is_object()) {
        if (auto e = keys(shapes[i], at, {"shape", "inits"}, {"shape"})) return unexpected(std::move(*e));
        if (auto e = binding(shapes[i]["shape"], at + "/shape", t.validation_shapes.back()))
          return unexpected(std::move(*e));
        if (shapes[i].contains("inits")) {
          const json& inits = shapes[i]["inits"];
          if (!inits.is_object())
            return unexpected(err(at + "/inits", fmt::format("must be an object like {{\"x\": \"normal(1000, 1)\"}}, got {}",
                                                             type_name(inits))));
          t.validation_inits.resize(i + 1);
          for (const auto& [name, d] : inits.items()) {
            const std::string field = at + "/inits/" + pointer_token(name);
            std::string text;
            if (auto e = string(d, field, text)) return unexpected(std::move(*e));
            auto parsed = parse_distribution(text);
            if (!parsed) return unexpected(err(field, distribution_error(text)));
            t.validation_inits[i][name] = *parsed;
          }
        }
        continue;
      }
      if (auto e = binding(shapes[i], at, t.validation_shapes.back())) return unexpected(std::move(*e));
    }
    if (j.contains("distributions")) {
      const json& d = j["distributions"];
      if (!d.is_array())
        return unexpected(err("/distributions", fmt::format("must be an array of distributions like [\"normal\", "
                                                            "\"large\"] (empty: the inputs' own only), got {}",
                                                            type_name(d))));
      t.distributions.emplace();
      for (std::size_t i = 0; i < d.size(); ++i) {
        const std::string field = fmt::format("/distributions/{}", i);
        std::string text;
        if (auto e = string(d[i], field, text)) return unexpected(std::move(*e));
        auto parsed = parse_distribution(text);
        if (!parsed) return unexpected(err(field, distribution_error(text)));
        t.distributions->push_back(*parsed);
      }
    }
    if (j.contains("inputs"))
      if (auto e = tensors(j["inputs"], "/inputs", true, t.inputs)) return unexpected(std::move(*e));
    if (auto e = tensors(j["outputs"], "/outputs", false, t.outputs)) return unexpected(std::move(*e));
    if (auto e = impl(j["reference"], "/reference", t.reference)) return unexpected(std::move(*e));
    if (j.contains("baseline")) {
      if (auto e = impl(j["baseline"], "/baseline", t.baseline)) return unexpected(std::move(*e));
    } else if (!t.reference.is_stored()) {
      t.baseline = t.reference;  // beside a stored reference, no baseline unless one is given
    }
    if (j.contains("compile_options"))
      if (auto e = strings(j["compile_options"], "/compile_options", t.compile_options)) return unexpected(std::move(*e));
    if (j.contains("scalars"))
      if (auto e = scalars(j["scalars"], "/scalars", t.scalars)) return unexpected(std::move(*e));
    return t;
  }

 private:
  using maybe_error = std::optional<error>;
  using json = nlohmann::json;

  error err(std::string field, std::string message) const {
    return detail::task_failure(file_, std::move(field), std::move(message));
  }

  static std::string type_name(const json& j) { return j.type_name(); }

  maybe_error keys(const json& j, const std::string& at, std::initializer_list<std::string_view> allowed,
                   std::initializer_list<std::string_view> required) const {
    if (!j.is_object()) return err(at, fmt::format("must be an object, got {}", type_name(j)));
    if (auto k = unknown_key(j, allowed)) return err(at + "/" + pointer_token(*k), unknown_key_problem(*k, allowed));
    for (auto k : required)
      if (!j.contains(k)) return err(at, fmt::format("missing required key '{}'", k));
    return std::nullopt;
  }

  maybe_error string(const json& j, const std::string& at, std::string& out) const {
    if (!j.is_string()) return err(at, fmt::format("must be a string, got {}", type_name(j)));
    out = j.get<std::string>();
    return std::nullopt;
  }

  /// Multi-line text: a string, or an array of lines (joined with '\n', each line terminated).
  maybe_error text(const json& j, const std::string& at, std::string& out) const {
    if (j.is_string()) return string(j, at, out);
    if (!j.is_array()) return err(at, fmt::format("must be a string or an array of lines, got {}", type_name(j)));
    out.clear();
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_string()) return err(fmt::format("{}/{}", at, i), fmt::format("must be a string, got {}", type_name(j[i])));
      out += j[i].get<std::string>();
      out += '\n';
    }
    return std::nullopt;
  }

  maybe_error strings(const json& j, const std::string& at, std::vector<std::string>& out) const {
    if (!j.is_array()) return err(at, fmt::format("must be an array of strings, got {}", type_name(j)));
    for (std::size_t i = 0; i < j.size(); ++i) {
      out.emplace_back();
      if (auto e = string(j[i], fmt::format("{}/{}", at, i), out.back())) return e;
    }
    return std::nullopt;
  }

  maybe_error binding(const json& j, const std::string& at, shape_binding& out) const {
    if (!j.is_object()) return err(at, fmt::format("must be an object like {{\"N\": 1000}}, got {}", type_name(j)));
    for (const auto& [k, v] : j.items()) {
      const std::string field = at + "/" + pointer_token(k);
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
        return err(field, fmt::format("must be an integer, got {}", v.dump()));
      out[k] = v.get<std::int64_t>();
    }
    return std::nullopt;
  }

  maybe_error tensors(const json& j, const std::string& at, bool inputs, std::vector<tensor_spec>& out) const {
    if (!j.is_array()) return err(at, fmt::format("must be an array of buffers, got {}", type_name(j)));
    for (std::size_t i = 0; i < j.size(); ++i) {
      const std::string base = fmt::format("{}/{}", at, i);
      const json& b = j[i];
      auto e = inputs ? keys(b, base, {"name", "dtype", "shape", "init"}, {"name", "dtype", "shape"})
                      : keys(b, base, {"name", "dtype", "shape", "tolerance"}, {"name", "dtype", "shape"});
      if (e) return e;
      tensor_spec s;
      if ((e = string(b["name"], base + "/name", s.name))) return e;
      std::string name;
      if ((e = string(b["dtype"], base + "/dtype", name))) return e;
      const auto type = parse_dtype(name);
      if (!type) return err(base + "/dtype", fmt::format("unknown dtype '{}' (known: {})", name, fmt::join(dtype_names, ", ")));
      s.type = *type;
      const json& shape = b["shape"];
      if (!shape.is_array()) return err(base + "/shape", fmt::format("must be an array of size expressions, got {}", type_name(shape)));
      for (std::size_t d = 0; d < shape.size(); ++d) {
        if (shape[d].is_number_integer()) s.shape.push_back(shape[d].dump());
        else if (shape[d].is_string()) s.shape.push_back(shape[d].get<std::string>());
        else return err(fmt::format("{}/shape/{}", base, d), fmt::format("must be a size expression (string) or an integer, got {}", shape[d].dump()));
      }
      if (inputs && b.contains("init")) {
        if ((e = string(b["init"], base + "/init", name))) return e;
        const auto init = parse_distribution(name);
        if (!init) return err(base + "/init", distribution_error(name));
        s.init = *init;
      }
      if (!inputs) {
        s.tol = default_tolerance(s.type);
        if (b.contains("tolerance")) {
          const json& tol = b["tolerance"];
          if ((e = keys(tol, base + "/tolerance", {"abs", "rel", "terms"}, {}))) return e;
          for (auto [key, dst] : {std::pair{"abs", &s.tol.abs}, std::pair{"rel", &s.tol.rel}, std::pair{"terms", &s.tol.terms}}) {
            if (!tol.contains(key)) continue;
            if (!tol[key].is_number())
              return err(fmt::format("{}/tolerance/{}", base, key), fmt::format("must be a number, got {}", tol[key].dump()));
            *dst = tol[key].get<double>();
          }
        }
      }
      out.push_back(std::move(s));
    }
    return std::nullopt;
  }

  maybe_error impl(const json& j, const std::string& at, implementation& out) const {
    if (auto e = keys(j, at, {"source", "source_file", "plan", "host", "stored", "recorded"}, {})) return e;
    if (j.contains("stored")) {
      std::string rel;
      if (auto e = string(j["stored"], at + "/stored", rel)) return e;
      if (rel.empty()) return err(at + "/stored", "must name a stored-reference file, got \"\"");
      const std::filesystem::path p = std::filesystem::path(rel).is_absolute() ? std::filesystem::path(rel) : dir_ / rel;
      out.stored = p.lexically_normal().string();
    }
    if (j.contains("recorded"))
      if (auto e = recorded(j["recorded"], at + "/recorded", out.recorded.emplace())) return e;
    if (j.contains("source") && j.contains("source_file"))
      return err(at, "give either 'source' (inline) or 'source_file' (a path), not both");
    if (j.contains("source"))
      if (auto e = text(j["source"], at + "/source", out.source)) return e;
    if (j.contains("source_file")) {
      std::string rel;
      if (auto e = string(j["source_file"], at + "/source_file", rel)) return e;
      const std::filesystem::path p = std::filesystem::path(rel).is_absolute() ? std::filesystem::path(rel) : dir_ / rel;
      auto text = read_regular_file(p, file_kinds::source);
      if (!text)
        return err(at + "/source_file", fmt::format("cannot read '{}' (looked in '{}'): {}", rel, p.string(),
                                                    whole_file_error(p.string(), text.error()).message));
      out.source = std::move(*text);
    }
    if (j.contains("plan"))
      if (auto e = text(j["plan"], at + "/plan", out.plan)) return e;
    if (j.contains("host"))
      if (auto e = string(j["host"], at + "/host", out.host)) return e;
    return std::nullopt;
  }

  /// `{"ms": 0.123, "device": "NVIDIA H200", "what": "...", "details": {...}}`.
  maybe_error recorded(const json& j, const std::string& at, recorded_time& out) const {
    if (auto e = keys(j, at, {"ms", "device", "what", "details"}, {"ms", "device"})) return e;
    if (!number_value(j["ms"], out.ms) || !(out.ms > 0) || !std::isfinite(out.ms))
      return err(at + "/ms", fmt::format("must be a time in milliseconds > 0, got {}", j["ms"].dump()));
    if (auto e = string(j["device"], at + "/device", out.device)) return e;
    if (j.contains("what"))
      if (auto e = string(j["what"], at + "/what", out.what)) return e;
    if (j.contains("details")) {
      if (!j["details"].is_object())
        return err(at + "/details", fmt::format("must be an object, got {}", type_name(j["details"])));
      out.details = j["details"].dump();
    }
    return std::nullopt;
  }

  /// `[{"name": "eps", "type": "f32", "value": 1e-5}, ...]`: the JSON types and
  /// that each value is one of its type's (names are checked by `validate_task`).
  maybe_error scalars(const json& j, const std::string& at, std::vector<scalar_spec>& out) const {
    if (!j.is_array())
      return err(at, fmt::format("must be an array of scalars like [{{\"name\": \"eps\", \"type\": \"f32\", \"value\": "
                                 "1e-5}}], got {}",
                                 type_name(j)));
    for (std::size_t i = 0; i < j.size(); ++i) {
      const std::string base = fmt::format("{}/{}", at, i);
      const json& v = j[i];
      if (auto e = keys(v, base, {"name", "type", "value"}, {"name", "type", "value"})) return e;
      scalar_spec s;
      if (auto e = string(v["name"], base + "/name", s.name)) return e;
      std::string type;
      if (auto e = string(v["type"], base + "/type", type)) return e;
      const auto parsed = parse_scalar_type(type);
      if (!parsed)
        return err(base + "/type",
                   fmt::format("unknown scalar type '{}' (known: {})", type, fmt::join(scalar_type_names, ", ")));
      s.type = *parsed;
      const json& value = v["value"];
      scalar_value written;
      if (value.is_number_unsigned()) written = scalar_value::of_uint(value.get<std::uint64_t>());
      else if (value.is_number_integer()) written = scalar_value::of_int(value.get<std::int64_t>());
      else if (value.is_number_float()) written = scalar_value::of_real(value.get<double>());
      else return err(base + "/value", fmt::format("must be a number, got {}", value.dump()));
      auto typed = convert_scalar(written, s.type);
      if (!typed) return err(base + "/value", scalar_value_error(written, s.type, typed.error()));
      if (is_floating(s.type)) s.real = convert_scalar(written, scalar_type::f64)->real;  // as written, not rounded
      else s.value = typed->value;
      out.push_back(std::move(s));
    }
    return std::nullopt;
  }

  std::string file_;
  std::filesystem::path dir_;
};

}  // namespace detail

/// Check a task's meaning: names, shapes on every binding, tolerances, and that
/// the reference and baseline plans parse and resolve on every shape. Tasks
/// built in code should pass this too; fields are named as in the JSON format.
///
/// @code
///   if (auto ok = specgen::validate_task(task); !ok) std::cerr << ok.error().what();
/// @endcode
inline expected<void, error> validate_task(const task& t, const device_limits& limits = {}) {
  using detail::is_identifier;
  auto fail = [&](std::string field, std::string message) {
    return unexpected(detail::task_failure(t.file, std::move(field), std::move(message)));
  };
  const std::string symbols_text = detail::join_names(t.symbols);

  if (!detail::is_task_name(t.name))
    return fail("/name", fmt::format("'{}' is not a task name: use letters, digits, '_', '-' and '.'", t.name));
  if (t.description.empty()) return fail("/description", "must not be empty: it is what the model is asked to do");

  for (std::size_t i = 0; i < t.symbols.size(); ++i) {
    const auto& s = t.symbols[i];
    const std::string field = fmt::format("/symbols/{}", i);
    if (!is_identifier(s)) return fail(field, fmt::format("'{}' is not a name (letters, digits, '_')", s));
    if (std::find(std::begin(detail::function_names), std::end(detail::function_names), s) != std::end(detail::function_names))
      return fail(field, fmt::format("'{}' is a function of size expressions; choose another name", s));
    if (std::find(t.symbols.begin(), t.symbols.begin() + static_cast<std::ptrdiff_t>(i), s) != t.symbols.begin() + static_cast<std::ptrdiff_t>(i))
      return fail(field, fmt::format("symbol '{}' is declared twice", s));
  }

  if (t.outputs.empty()) return fail("/outputs", "at least one output is required");
  std::vector<std::string> buffer_names;
  // Parsed shapes, per buffer, in the order inputs then outputs.
  std::vector<std::pair<std::string, std::vector<size_expr>>> shapes;
  for (int out = 0; out < 2; ++out) {
    const auto& list = out ? t.outputs : t.inputs;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& b = list[i];
      const std::string base = fmt::format("/{}/{}", out ? "outputs" : "inputs", i);
      if (!is_identifier(b.name)) return fail(base + "/name", fmt::format("'{}' is not a name (letters, digits, '_')", b.name));
      if (std::count(buffer_names.begin(), buffer_names.end(), b.name))
        return fail(base + "/name", fmt::format("buffer '{}' is declared twice", b.name));
      if (std::count(t.symbols.begin(), t.symbols.end(), b.name))
        return fail(base + "/name", fmt::format("'{}' is already a size symbol", b.name));
      buffer_names.push_back(b.name);
      shapes.emplace_back(base, std::vector<size_expr>{});
      for (std::size_t d = 0; d < b.shape.size(); ++d) {
        const std::string field = fmt::format("{}/shape/{}", base, d);
        auto e = parse_size_expr(b.shape[d]);
        if (!e) return fail(field, e.error().what());
        for (const auto& n : e->names())
          if (!std::count(t.symbols.begin(), t.symbols.end(), n))
            return fail(field, fmt::format("'{}' uses unknown name '{}' (symbols: {})", b.shape[d], n, symbols_text));
        shapes.back().second.push_back(std::move(*e));
      }
      if (out) {
        for (auto [key, v] : {std::pair{"abs", b.tol.abs}, std::pair{"rel", b.tol.rel}, std::pair{"terms", b.tol.terms}})
          if (!(v >= 0) || !std::isfinite(v))
            return fail(fmt::format("{}/tolerance/{}", base, key), fmt::format("must be finite and non-negative, got {}", v));
      }
    }
  }

  // Scalars: names distinct from the symbols, the buffers and each other; a
  // value of the type (a task built in code may hold any pattern).
  for (std::size_t i = 0; i < t.scalars.size(); ++i) {
    const scalar_spec& s = t.scalars[i];
    const std::string base = fmt::format("/scalars/{}", i);
    if (!is_identifier(s.name)) return fail(base + "/name", fmt::format("'{}' is not a name (letters, digits, '_')", s.name));
    if (std::find(std::begin(detail::function_names), std::end(detail::function_names), s.name) !=
        std::end(detail::function_names))
      return fail(base + "/name", fmt::format("'{}' is a function of size expressions; choose another name", s.name));
    if (std::count(t.symbols.begin(), t.symbols.end(), s.name))
      return fail(base + "/name", fmt::format("'{}' is already a size symbol", s.name));
    if (std::count(buffer_names.begin(), buffer_names.end(), s.name))
      return fail(base + "/name", fmt::format("'{}' is already a buffer", s.name));
    for (std::size_t k = 0; k < i; ++k)
      if (t.scalars[k].name == s.name)
        return fail(base + "/name", fmt::format("scalar '{}' is declared twice (first at /scalars/{})", s.name, k));
    const scalar_value v = is_floating(s.type) ? scalar_value::of_real(s.real) : scalar_value::of(s);
    if (auto typed = convert_scalar(v, s.type); !typed)
      return fail(base + "/value", detail::scalar_value_error(v, s.type, typed.error()));
  }

  auto check_binding = [&](const shape_binding& b, const std::string& at) -> expected<void, error> {
    for (const auto& s : t.symbols)
      if (!b.count(s)) return fail(at, fmt::format("symbol '{}' has no value", s));
    for (const auto& [k, v] : b) {
      const std::string field = at + "/" + detail::pointer_token(k);
      if (!std::count(t.symbols.begin(), t.symbols.end(), k))
        return fail(field, fmt::format("'{}' is not a declared symbol (symbols: {})", k, symbols_text));
      if (v < 1) return fail(field, fmt::format("must be at least 1, got {}", v));
    }
    for (const auto& [base, dims] : shapes) {
      std::int64_t elements = 1;
      for (std::size_t d = 0; d < dims.size(); ++d) {
        const std::string field = fmt::format("{}/shape/{}", base, d);
        auto v = dims[d].eval(b);
        if (!v) return fail(field, fmt::format("at shape {}: {}", detail::binding_text(b), v.error().what()));
        if (*v < 1)
          return fail(field, fmt::format("at shape {}: '{}' = {}; dimensions must be at least 1",
                                         detail::binding_text(b), dims[d].to_string(), *v));
        if (__builtin_mul_overflow(elements, *v, &elements))
          return fail(field, fmt::format("at shape {}: the element count overflows signed 64 bits",
                                         detail::binding_text(b)));
      }
    }
    return {};
  };
  if (auto ok = check_binding(t.benchmark_shape, "/benchmark_shape"); !ok) return ok;
  if (t.validation_shapes.empty()) return fail("/validation_shapes", "at least one validation shape is required");
  for (std::size_t i = 0; i < t.validation_shapes.size(); ++i)
    if (auto ok = check_binding(t.validation_shapes[i], fmt::format("/validation_shapes/{}", i)); !ok) return ok;
  if (t.validation_inits.size() > t.validation_shapes.size())
    return fail("/validation_shapes", fmt::format("{} sets of inits for {} validation shapes", t.validation_inits.size(),
                                                  t.validation_shapes.size()));
  for (std::size_t i = 0; i < t.validation_inits.size(); ++i)
    for (const auto& [name, d] : t.validation_inits[i])
      if (std::none_of(t.inputs.begin(), t.inputs.end(), [&](const tensor_spec& in) { return in.name == name; }))
        return fail(fmt::format("/validation_shapes/{}/inits/{}", i, detail::pointer_token(name)),
                    fmt::format("'{}' is not an input of the task (inputs: {})", name, [&] {
                      std::vector<std::string> names;
                      for (const auto& in : t.inputs) names.push_back(in.name);
                      return detail::join_names(names);
                    }()));

  for (int which = 0; which < 2; ++which) {
    const implementation& im = which ? t.baseline : t.reference;
    const std::string at = which ? "/baseline" : "/reference";
    const bool device = im.is_device_code();
    const int kinds = int{device} + int{im.is_host()} + int{im.is_stored()} + int{im.is_recorded()};
    if (which == 0 && im.is_recorded())
      return fail(at + "/recorded", "a reference computes outputs: a recorded time can only be a baseline");
    if (which == 1 && im.is_stored())
      return fail(at + "/stored", "a baseline is timed: stored outputs can only be a reference");
    if (which == 1 && kinds == 0 && t.reference.is_stored()) continue;  // no baseline: no speedup
    if (kinds != 1)
      return fail(at, kinds > 1 ? "give one of 'host', 'source' with 'plan', 'stored' (a reference) or 'recorded' (a "
                                  "baseline), not several"
                                : which == 0 ? "give 'source' (or 'source_file') with 'plan', 'host', or 'stored'"
                                             : "give 'source' (or 'source_file') with 'plan', 'host', or 'recorded'");
    if (!device) continue;
    if (im.plan.empty()) return fail(at + "/plan", "the source needs a launch plan: give 'plan'");
    auto plan = parse_plan(im.plan);
    if (!plan) return fail(at + "/plan", plan.error().what());
    if (im.source.empty() && !plan->launches.empty())
      return fail(at + "/source", "the plan launches kernels: give their device source in 'source' or 'source_file'");
    for (const auto& k : kernel_names(*plan)) {
      // A whole-word occurrence is enough here: the compiler gives the precise error.
      bool found = false;
      for (std::size_t p = im.source.find(k); p != std::string::npos && !found; p = im.source.find(k, p + 1)) {
        const bool left = p == 0 || !detail::is_name_char(im.source[p - 1]);
        const bool right = p + k.size() == im.source.size() || !detail::is_name_char(im.source[p + k.size()]);
        found = left && right;
      }
      if (!found) return fail(at + "/plan", fmt::format("launches kernel '{}', which the source does not define", k));
    }
    auto resolve_at = [&](const shape_binding& b) -> expected<void, error> {
      auto r = resolve(*plan, t, b, limits);
      if (!r) return fail(at + "/plan", fmt::format("at shape {}: {}", detail::binding_text(b), r.error().what()));
      return {};
    };
    if (auto ok = resolve_at(t.benchmark_shape); !ok) return ok;
    for (const auto& b : t.validation_shapes)
      if (auto ok = resolve_at(b); !ok) return ok;
  }
  for (std::size_t i = 0; i < t.compile_options.size(); ++i)
    if (t.compile_options[i].empty()) return fail(fmt::format("/compile_options/{}", i), "must not be empty");
  return {};
}

/// Read and check a task from parsed JSON. `file` names it in errors and is
/// the base of relative `source_file` paths.
inline expected<task, error> parse_task(const nlohmann::json& j, std::string_view file) {
  const std::filesystem::path path(file);
  return detail::task_reader(std::string(file), path.parent_path()).read(j).and_then([](task t) {
    return validate_task(t).transform([&] { return std::move(t); });
  });
}

/// Load and check one task file (JSON; `//` and `/* */` comments allowed).
/// Every failure, a path that is not a regular file or a file over the limit
/// (4 MiB, and as much for a source_file) included, is an `error`; this
/// never throws.
inline expected<task, error> load_task(const std::filesystem::path& path) noexcept {
  const std::string file = path.string();
  try {
    return detail::read_json_file(path, detail::file_kinds::task)
        .transform_error([&](const error& e) { return detail::whole_file_error(file, e); })
        .and_then([&](const nlohmann::json& j) { return parse_task(j, file); })
        .and_then([&](task t) -> expected<task, error> {
          if (!t.reference.is_stored()) return t;
          // The header and the sizes of every buffer; the checksums are verified as buffers are read.
          auto ref = stored_reference::open(t.reference.stored);
          if (!ref) return unexpected(ref.error());
          if (auto ok = ref->check(t); !ok) return unexpected(ok.error());
          return t;
        });
  } catch (const std::exception& e) {  // bad_alloc, or a bug: still an error value for the caller
    return unexpected(detail::task_failure(file, "", fmt::format("cannot load the task: {}", e.what())));
  }
}

/// Load the task files `files`, in that order. Two files defining the same
/// task name are an error naming both.
inline expected<std::vector<task>, error> load_tasks(const std::vector<std::filesystem::path>& files) noexcept {
  try {
    std::vector<task> tasks;
    std::map<std::string, std::string> file_of;  // task name -> the file defining it
    for (const auto& f : files) {
      auto t = load_task(f);
      if (!t) return unexpected(t.error());
      if (auto [it, fresh] = file_of.emplace(t->name, t->file); !fresh)
        return unexpected(detail::task_failure(t->file, "/name",
                                     fmt::format("task '{}' is also defined in {}; task names must be unique: rename "
                                                 "one of them or remove one of the files",
                                                 t->name, it->second)));
      tasks.push_back(std::move(*t));
    }
    return tasks;
  } catch (const std::exception& e) {
    return unexpected(detail::task_failure("", "", fmt::format("cannot load the tasks: {}", e.what())));
  }
}

/// Load every `*.json` file of `directory` (not recursive) as a task, sorted
/// by task name. Two files defining the same task name are an error.
inline expected<std::vector<task>, error> load_suite(const std::filesystem::path& directory) noexcept {
  auto files = detail::json_files_in(directory);
  if (!files) return unexpected(detail::whole_file_error(directory.string(), files.error()));
  if (files->empty()) return unexpected(detail::task_failure(directory.string(), "", "no *.json task files in the directory"));
  auto suite = load_tasks(*files);
  if (suite) std::stable_sort(suite->begin(), suite->end(), [](const task& a, const task& b) { return a.name < b.name; });
  return suite;
}

/// The task as JSON in the task-file format; `parse_task` of it gives the task
/// back (sources are written inline, the baseline always explicitly).
inline nlohmann::json to_json(const task& t) {
  using json = nlohmann::json;
  auto tensors = [](const std::vector<tensor_spec>& list, bool inputs) {
    json out = json::array();
    for (const auto& b : list) {
      json j{{"name", b.name}, {"dtype", to_string(b.type)}, {"shape", b.shape}};
      if (inputs) {
        j["init"] = to_string(b.init);
      } else {
        j["tolerance"] = {{"abs", b.tol.abs}, {"rel", b.tol.rel}};
        if (b.tol.terms != default_tolerance(b.type).terms) j["tolerance"]["terms"] = b.tol.terms;
      }
      out.push_back(std::move(j));
    }
    return out;
  };
  auto impl = [](const implementation& im) {
    if (im.is_host()) return json{{"host", im.host}};
    if (im.is_stored()) return json{{"stored", im.stored}};
    if (im.recorded) {
      json r{{"ms", im.recorded->ms}, {"device", im.recorded->device}};
      if (!im.recorded->what.empty()) r["what"] = im.recorded->what;
      if (!im.recorded->details.empty()) r["details"] = json::parse(im.recorded->details, nullptr, false);
      return json{{"recorded", std::move(r)}};
    }
    return json{{"source", im.source}, {"plan", im.plan}};
  };
  json shapes = json::array();
  for (std::size_t i = 0; i < t.validation_shapes.size(); ++i) {
    if (i < t.validation_inits.size() && !t.validation_inits[i].empty()) {
      json inits = json::object();
      for (const auto& [name, d] : t.validation_inits[i]) inits[name] = to_string(d);
      shapes.push_back({{"shape", t.validation_shapes[i]}, {"inits", std::move(inits)}});
    } else {
      shapes.push_back(t.validation_shapes[i]);
    }
  }
  json out{{"name", t.name},
            {"description", t.description},
            {"symbols", t.symbols},
            {"benchmark_shape", t.benchmark_shape},
            {"validation_shapes", std::move(shapes)},
            {"inputs", tensors(t.inputs, true)},
            {"outputs", tensors(t.outputs, false)},
            {"reference", impl(t.reference)},
            {"compile_options", t.compile_options}};
  if (!(t.reference.is_stored() && t.baseline == implementation{})) out["baseline"] = impl(t.baseline);
  if (t.distributions) {
    out["distributions"] = json::array();
    for (const auto& d : *t.distributions) out["distributions"].push_back(to_string(d));
  }
  if (!t.scalars.empty()) {
    json list = json::array();
    for (const auto& s : t.scalars) {
      json value = is_floating(s.type) ? json(s.real)
                   : is_signed(s.type) ? json(s.value)
                                       : json(static_cast<std::uint64_t>(s.value));
      list.push_back({{"name", s.name}, {"type", to_string(s.type)}, {"value", std::move(value)}});
    }
    out["scalars"] = std::move(list);
  }
  return out;
}

/// nlohmann's conversion hook, so `nlohmann::json j = task;` works.
inline void to_json(nlohmann::json& j, const task& t) { j = to_json(t); }

SPECGEN_END_NAMESPACE
