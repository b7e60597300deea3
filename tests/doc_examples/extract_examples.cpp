// Writes the `@code ... @endcode` blocks of one header's comments as a C++ translation unit, so
// that the examples the headers show are compiled with the tests (tests/doc_examples/CMakeLists.txt).
//
//   doc_examples_gen <header> <name> <out.cpp> [unchecked]
//
// <header> is the file to read, <name> its include name (specgen/compare.hpp). Each block becomes
// the body of its own function, `[[maybe_unused]] static auto example_<line>()`, whose return type
// follows the block's `return`s, inside namespace specgen::doc_examples (so unqualified specgen
// names and the prelude's stand-ins, doc_prelude.hpp, are found). A block whose `@code` line says
// `// namespace scope`, or whose first line starts a declaration (struct, class, template, ...),
// is placed at namespace scope instead, in a namespace of its own. `#line` directives point every
// diagnostic at the header's own line. A header without blocks gives an empty file.
#include <cctype>
#include <cstddef>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct block {
  std::size_t line = 0;  // 1-based line of the first code line
  bool namespace_scope = false;
  std::vector<std::string> code;
};

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// The text of a comment line without its `///` or ` * ` prefix (leading blanks kept after it, so
// the example's own indentation survives).
std::string strip_comment(std::string_view line) {
  std::string_view s = trim_left(line);
  if (s.starts_with("///")) {
    s.remove_prefix(3);
  } else if (s.starts_with("*") && !s.starts_with("*/")) {
    s.remove_prefix(1);
  }
  return std::string(s);
}

bool starts_declaration(const std::vector<std::string>& code) {
  for (const auto& l : code) {
    std::string_view s = trim_left(l);
    if (s.empty() || s.starts_with("//")) continue;
    for (std::string_view kw : {"struct ", "class ", "template", "namespace ", "enum ", "union "}) {
      if (s.starts_with(kw)) return true;
    }
    return false;
  }
  return false;
}

/// A C++ name for the header (`specgen/policy/kv.hpp` -> `specgen_policy_kv_hpp`): each header's
/// examples get a namespace of their own, so the generated files can be compiled as one (unity build).
std::string stem_of(std::string_view name) {
  std::string out;
  for (char ch : name) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::cerr << "usage: doc_examples_gen <header> <include-name> <out.cpp> [unchecked]\n";
    return 2;
  }
  const std::string header = argv[1];
  const std::string name = argv[2];
  const std::string out_path = argv[3];
  const bool unchecked = argc == 5;

  std::ifstream in(header);
  if (!in) {
    std::cerr << "doc_examples_gen: cannot read " << header << '\n';
    return 1;
  }
  std::vector<block> blocks;
  std::string line;
  std::size_t n = 0;
  block* open = nullptr;
  while (std::getline(in, line)) {
    ++n;
    if (open != nullptr) {
      if (line.find("@endcode") != std::string::npos) {
        open->namespace_scope = open->namespace_scope || starts_declaration(open->code);
        open = nullptr;
      } else {
        open->code.push_back(strip_comment(line));
      }
      continue;
    }
    const auto at = line.find("@code");
    if (at == std::string::npos) continue;
    blocks.push_back({.line = n + 1, .namespace_scope = line.find("namespace scope", at) != std::string::npos, .code = {}});
    open = &blocks.back();
  }
  if (open != nullptr) {
    std::cerr << header << ':' << open->line - 1 << ": @code without @endcode\n";
    return 1;
  }

  std::ostringstream o;
  o << "// Generated from " << name << " by doc_examples_gen (tests/doc_examples); do not edit.\n";
  if (unchecked) o << "// This header is on the not-yet-checked list of tests/doc_examples/CMakeLists.txt.\n";
  if (!blocks.empty()) {
    o << "#include <" << name << ">\n"
      << (name.starts_with("specgen/gpu/") ? "#include \"doc_prelude_gpu.hpp\"\n\n" : "#include \"doc_prelude.hpp\"\n\n")
      << "namespace specgen::doc_examples::" << stem_of(name) << " {\n";
    for (const auto& b : blocks) {
      o << '\n';
      if (b.namespace_scope) {
        o << "namespace example_" << b.line << " {\n";
      } else {
        o << "[[maybe_unused]] static auto example_" << b.line << "() {\n";
      }
      o << "#line " << b.line << " \"" << header << "\"\n";
      for (const auto& c : b.code) o << c << '\n';
      o << (b.namespace_scope ? "}  // namespace\n" : "}\n");
    }
    o << "\n}  // namespace specgen::doc_examples::" << stem_of(name) << "\n";
  }

  // Rewrite only on change, so an edit elsewhere in the header recompiles nothing.
  {
    std::ifstream old(out_path, std::ios::binary);
    std::ostringstream prev;
    prev << old.rdbuf();
    if (old && prev.str() == o.str()) return 0;
  }
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  out << o.str();
  if (!out) {
    std::cerr << "doc_examples_gen: cannot write " << out_path << '\n';
    return 1;
  }
  return 0;
}
