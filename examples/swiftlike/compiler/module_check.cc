// module_check: the test over the example's SwiftCompile outputs.
//
// Contract: module_check MANIFEST, run as a Bazel test (cwd = the runfiles
// root of this workspace). MANIFEST has one line per library, written by the
// swift_like_manifest rule from what analysis knows:
//   lib NAME MODULE_PATH EXPECTED_INPUTS [IMPORT=IMPORT_MODULE_PATH]...
// For every library it checks that the module file
//   - is a SWIFTLIKE-MODULE for NAME,
//   - says the compiler read exactly EXPECTED_INPUTS files (sources, every
//     transitive module, the SDK tree), i.e. the action saw all its inputs,
//   - records for each direct import the content hash of that import's module
//     file as it is now, i.e. each dependent was compiled against the very
//     output its dependency produced,
//   - and, when CLONESTAGE_EXPECT_STAGED=1 is in the test's environment, says
//     `staged verified`: the compiler found every input staged as clonestage
//     promises (see swiftc_like.cc).
// Prints one line per library; exit 0 when all pass, 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/fasthash.h"

namespace {

struct Lib {
  std::string name;
  std::string module_path;
  long long expected_inputs = 0;
  std::vector<std::pair<std::string, std::string>> imports;  // name, module path
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::string HashOf(const std::string& content) {
  swiftlike::FastHash h;
  h.Update(content);
  return h.HexDigest();
}

// The `key value` header lines of a module file, up to `end`.
std::multimap<std::string, std::string> Header(const std::string& content) {
  std::multimap<std::string, std::string> fields;
  std::istringstream in(content);
  std::string line;
  while (std::getline(in, line) && line != "end") {
    size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    fields.emplace(line.substr(0, space), line.substr(space + 1));
  }
  return fields;
}

std::string One(const std::multimap<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  return it == fields.end() ? "" : it->second;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: module_check MANIFEST\n");
    return 2;
  }
  const char* expect = std::getenv("CLONESTAGE_EXPECT_STAGED");
  bool want_staged = expect != nullptr && std::string(expect) == "1";

  std::ifstream manifest(argv[1]);
  if (!manifest) {
    std::fprintf(stderr, "module_check: cannot open manifest %s\n", argv[1]);
    return 1;
  }
  std::vector<Lib> libs;
  std::string line;
  while (std::getline(manifest, line)) {
    std::istringstream in(line);
    std::string tag;
    Lib lib;
    if (!(in >> tag >> lib.name >> lib.module_path >> lib.expected_inputs) || tag != "lib") {
      std::fprintf(stderr, "module_check: bad manifest line: %s\n", line.c_str());
      return 1;
    }
    std::string imp;
    while (in >> imp) {
      size_t eq = imp.find('=');
      lib.imports.emplace_back(imp.substr(0, eq), imp.substr(eq + 1));
    }
    libs.push_back(lib);
  }
  if (libs.empty()) {
    std::fprintf(stderr, "module_check: manifest %s lists no library\n", argv[1]);
    return 1;
  }

  int failures = 0;
  for (const Lib& lib : libs) {
    std::vector<std::string> problems;
    std::string content;
    if (!ReadFile(lib.module_path, &content)) {
      problems.push_back("cannot read " + lib.module_path);
    } else {
      auto fields = Header(content);
      if (content.compare(0, 19, "SWIFTLIKE-MODULE 1\n") != 0) {
        problems.push_back("not a SWIFTLIKE-MODULE file");
      }
      if (One(fields, "name") != lib.name) {
        problems.push_back("name is '" + One(fields, "name") + "'");
      }
      std::string inputs = One(fields, "inputs");
      if (std::atoll(inputs.c_str()) != lib.expected_inputs) {
        problems.push_back("read " + inputs + " inputs, expected " +
                           std::to_string(lib.expected_inputs));
      }
      std::map<std::string, std::string> recorded;
      auto range = fields.equal_range("import");
      for (auto it = range.first; it != range.second; ++it) {
        size_t space = it->second.find(' ');
        recorded[it->second.substr(0, space)] = it->second.substr(space + 1);
      }
      if (recorded.size() != lib.imports.size()) {
        problems.push_back("records " + std::to_string(recorded.size()) + " imports, expected " +
                           std::to_string(lib.imports.size()));
      }
      for (const auto& imp : lib.imports) {
        std::string dep;
        if (!ReadFile(imp.second, &dep)) {
          problems.push_back("cannot read import " + imp.second);
        } else if (recorded[imp.first] != HashOf(dep)) {
          problems.push_back("import " + imp.first + " was compiled against other content than " +
                             imp.second);
        }
      }
      if (want_staged && One(fields, "staged") != "verified") {
        problems.push_back("CLONESTAGE_EXPECT_STAGED=1 but the module says staged " +
                           One(fields, "staged"));
      }
      if (problems.empty()) {
        std::printf("ok   %-18s inputs %-5s sdk %-5s imports %zu staged %s\n", lib.name.c_str(),
                    inputs.c_str(), One(fields, "sdk-files").c_str(), lib.imports.size(),
                    One(fields, "staged").c_str());
      }
    }
    for (const auto& p : problems) {
      std::printf("FAIL %-18s %s\n", lib.name.c_str(), p.c_str());
    }
    if (!problems.empty()) ++failures;
  }
  std::printf("%zu libraries, %d failed\n", libs.size(), failures);
  return failures == 0 ? 0 : 1;
}
