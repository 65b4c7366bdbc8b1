// swiftc_like: a SwiftCompile stand-in for the clonestage example workspace.
//
// Contract:
//   swiftc_like @PARAMS          (one argument per line, as Bazel writes them)
//   swiftc_like ARGS...
// with
//   --module-name NAME           module being compiled
//   --emit-module PATH           .swiftmodule-like output (feeds dependents)
//   --emit-doc PATH              .swiftdoc-like output
//   --emit-object PATH           .o-like output
//   --module-pad BYTES           size the module file is padded to (scale)
//   --src PATH                   a source file (repeatable)
//   --import NAME PATH           a direct dependency's module (repeatable)
//   --module PATH                any module on the search path (repeatable)
//   --sdk PATH                   an SDK file (repeatable)
//   --module-cache-path PATH     the implicit module cache (rules_swift passes
//                                -module-cache-path <bin_dir>/_swift_module_cache)
//   --sdkroot DIR                where system modules live (outside the action's inputs,
//                                like Xcode's SDK)
//   --implicit-import NAME       a module the sources import, built or loaded through
//                                the module cache with everything it imports (repeatable)
//   --clang-module NAME=MAP      a workspace module with its module map, an input
//   --implicit-module-ms N       CPU ms to build one implicit module (default 150)
//   --modcache-report PATH       output: one line per module the compile needed
//   --work-ms N                  CPU ms of type-checking and code generation (default 0)
//
// Implicit modules (module_cache.h): each --implicit-import is loaded from the module cache
// or built into it, keyed like clang by the canonical path of its module map, under a
// LockFileManager-like lock shared by concurrent compiles. The report says, per module,
// "loaded", "built" or "waited"; the module outputs stay the same whatever the cache held.
//
// It reads and hashes every input, like a compiler that parses its sources
// and loads every module and header it can see, and writes deterministic
// outputs: the module file records the module's name, how many inputs it
// read, a digest over (path, content) of all of them, and for each direct
// import the content hash of that module, which the checker verifies.
//
// When CLONESTAGE_EXPECT_STAGED=1 it first checks what clonestage promises:
// every input (the params file and this binary included) is a regular file
// that nobody may write, reached without a symlink on the way, and the action
// root and each output's directory are writable. Under Bazel's local strategy
// the check fails (inputs there are symlinks into the source tree), which is
// the point.
//
// Exit codes: 0 success, 1 an input or output problem (each one named on
// stderr), 2 bad usage.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "compiler/fasthash.h"
#include "compiler/module_cache.h"

namespace {

struct Options {
  std::string module_name;
  std::string module_out;
  std::string doc_out;
  std::string object_out;
  long long module_pad = 0;
  std::vector<std::string> srcs;
  std::vector<std::pair<std::string, std::string>> imports;
  std::vector<std::string> modules;
  std::vector<std::string> sdk;
  std::vector<std::string> params_files;
  swiftlike::ModuleCacheOptions modcache;
  std::vector<std::string> implicit_imports;
  std::string modcache_report;
  long long work_ms = 0;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "swiftc_like: %s\n", why.c_str());
  std::fprintf(stderr,
               "usage: swiftc_like [@PARAMS] --module-name NAME --emit-module PATH "
               "--emit-doc PATH --emit-object PATH [--module-pad BYTES] [--src PATH]... "
               "[--import NAME PATH]... [--module PATH]... [--sdk PATH]... "
               "[--module-cache-path DIR --sdkroot DIR [--implicit-import NAME]... "
               "[--clang-module NAME=MAP]... [--implicit-module-ms N] [--modcache-report PATH]] "
               "[--work-ms N]\n");
  std::exit(2);
}

// Expands @file arguments (one argument per line) in place.
std::vector<std::string> ExpandArgs(int argc, char** argv, Options* opts) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() > 1 && arg[0] == '@') {
      std::string path = arg.substr(1);
      std::ifstream in(path);
      if (!in) {
        std::fprintf(stderr, "swiftc_like: cannot open params file %s: %s\n", path.c_str(),
                     std::strerror(errno));
        std::exit(1);
      }
      opts->params_files.push_back(path);
      std::string line;
      while (std::getline(in, line)) out.push_back(line);
    } else {
      out.push_back(arg);
    }
  }
  return out;
}

Options Parse(int argc, char** argv) {
  Options opts;
  std::vector<std::string> args = ExpandArgs(argc, argv, &opts);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](int n = 1) -> const std::string& {
      if (i + n >= args.size()) Usage(a + " needs a value");
      i += n;
      return args[i];
    };
    if (a == "--module-name") {
      opts.module_name = value();
    } else if (a == "--emit-module") {
      opts.module_out = value();
    } else if (a == "--emit-doc") {
      opts.doc_out = value();
    } else if (a == "--emit-object") {
      opts.object_out = value();
    } else if (a == "--module-pad") {
      opts.module_pad = std::atoll(value().c_str());
    } else if (a == "--src") {
      opts.srcs.push_back(value());
    } else if (a == "--import") {
      if (i + 2 >= args.size()) Usage("--import needs NAME PATH");
      opts.imports.emplace_back(args[i + 1], args[i + 2]);
      i += 2;
    } else if (a == "--module") {
      opts.modules.push_back(value());
    } else if (a == "--sdk") {
      opts.sdk.push_back(value());
    } else if (a == "--module-cache-path") {
      opts.modcache.cache_path = value();
    } else if (a == "--sdkroot") {
      opts.modcache.sdkroot = value();
    } else if (a == "--implicit-import") {
      opts.implicit_imports.push_back(value());
    } else if (a == "--clang-module") {
      const std::string& v = value();
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) Usage("--clang-module needs NAME=MODULEMAP");
      opts.modcache.workspace_maps[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (a == "--implicit-module-ms") {
      opts.modcache.build_ms = std::atoll(value().c_str());
    } else if (a == "--modcache-report") {
      opts.modcache_report = value();
    } else if (a == "--work-ms") {
      opts.work_ms = std::atoll(value().c_str());
    } else {
      Usage("unknown argument " + a);
    }
  }
  if (opts.module_name.empty() || opts.module_out.empty() || opts.doc_out.empty() ||
      opts.object_out.empty()) {
    Usage("--module-name, --emit-module, --emit-doc and --emit-object are required");
  }
  return opts;
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Why `path` is not a staged input, or "" if it is one.
std::string StagingProblem(const std::string& path) {
  struct stat st;
  // Every directory on the way must be a real directory, not a symlink.
  size_t pos = (!path.empty() && path[0] == '/') ? 1 : 0;
  while ((pos = path.find('/', pos)) != std::string::npos) {
    std::string prefix = path.substr(0, pos);
    if (lstat(prefix.c_str(), &st) != 0) {
      return "cannot lstat " + prefix + ": " + std::strerror(errno);
    }
    if (S_ISLNK(st.st_mode)) return "directory " + prefix + " is a symlink";
    ++pos;
  }
  if (lstat(path.c_str(), &st) != 0) return std::string("cannot lstat: ") + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) return "is a symlink";
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if ((st.st_mode & 0222) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("is writable (mode ") + mode + ")";
  }
  return "";
}

int CheckStaged(const Options& opts, const std::vector<std::string>& inputs,
                const std::string& self) {
  std::vector<std::string> problems;
  auto check = [&](const std::string& path) {
    std::string why = StagingProblem(path);
    if (!why.empty()) problems.push_back("input " + path + ": " + why);
  };
  for (const auto& p : opts.params_files) check(p);
  if (self.find('/') != std::string::npos) check(self);
  for (const auto& p : inputs) check(p);
  if (access(".", W_OK) != 0) {
    problems.push_back(std::string("action root is not writable: ") + std::strerror(errno));
  }
  for (const std::string& out : {opts.module_out, opts.doc_out, opts.object_out}) {
    std::string dir = Dirname(out);
    if (access(dir.c_str(), W_OK) != 0) {
      problems.push_back("output directory " + dir + " is not writable: " + std::strerror(errno));
    }
  }
  if (problems.empty()) return 0;
  std::fprintf(stderr,
               "swiftc_like: CLONESTAGE_EXPECT_STAGED=1 but %zu input(s) or directories are not "
               "staged as clonestage promises:\n",
               problems.size());
  for (size_t i = 0; i < problems.size() && i < 20; ++i) {
    std::fprintf(stderr, "  %s\n", problems[i].c_str());
  }
  if (problems.size() > 20) std::fprintf(stderr, "  ... and %zu more\n", problems.size() - 20);
  return 1;
}

// Hashes a whole file; false (with a message) if it cannot be read.
bool HashFile(const std::string& path, std::string* hex, long long* bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "swiftc_like: cannot open input %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return false;
  }
  static std::vector<char> buf(1 << 20);
  swiftlike::FastHash h;
  long long total = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::fprintf(stderr, "swiftc_like: cannot read input %s: %s\n", path.c_str(),
                   std::strerror(errno));
      close(fd);
      return false;
    }
    if (n == 0) break;
    h.Update(buf.data(), static_cast<size_t>(n));
    total += n;
  }
  close(fd);
  *hex = h.HexDigest();
  *bytes = total;
  return true;
}

bool WriteFile(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "swiftc_like: cannot create output %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return false;
  }
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::fprintf(stderr, "swiftc_like: cannot write output %s: %s\n", path.c_str(),
                   std::strerror(errno));
      close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    std::fprintf(stderr, "swiftc_like: cannot close output %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return false;
  }
  return true;
}

// Deterministic filler so outputs have realistic sizes.
void Pad(std::string* s, long long size, const std::string& seed) {
  std::string line = "// " + seed + " padding\n";
  while (static_cast<long long>(s->size()) + static_cast<long long>(line.size()) <= size) {
    s->append(line);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opts = Parse(argc, argv);

  std::vector<std::string> inputs;
  inputs.insert(inputs.end(), opts.srcs.begin(), opts.srcs.end());
  inputs.insert(inputs.end(), opts.modules.begin(), opts.modules.end());
  inputs.insert(inputs.end(), opts.sdk.begin(), opts.sdk.end());
  std::sort(inputs.begin(), inputs.end());
  inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());

  const char* expect = std::getenv("CLONESTAGE_EXPECT_STAGED");
  bool staged_checked = expect != nullptr && std::string(expect) == "1";
  if (staged_checked && CheckStaged(opts, inputs, argv[0]) != 0) return 1;

  swiftlike::FastHash digest;
  long long total_bytes = 0;
  for (const auto& path : inputs) {
    std::string hex;
    long long bytes = 0;
    if (!HashFile(path, &hex, &bytes)) return 1;
    digest.Update(path);
    digest.Update("\n", 1);
    digest.Update(hex);
    total_bytes += bytes;
  }

  // Importing modules: the clang importer loads or builds them before type-checking.
  opts.modcache.target = "arm64-apple-ios";
  opts.modcache.pcm_bytes = opts.module_pad < 4096 ? 65536 : opts.module_pad * 8;
  std::vector<swiftlike::ModuleEvent> events;
  for (const auto& w : opts.modcache.workspace_maps) {
    if (std::find(opts.implicit_imports.begin(), opts.implicit_imports.end(), w.first) ==
        opts.implicit_imports.end()) {
      opts.implicit_imports.push_back(w.first);
    }
  }
  if (!swiftlike::ImportModules(opts.modcache, opts.implicit_imports, &events)) return 1;
  if (!opts.modcache_report.empty()) {
    std::string report;
    for (const auto& e : events) report += "module " + e.name + " " + e.how + " " + e.pcm + "\n";
    if (!WriteFile(opts.modcache_report, report)) return 1;
  }
  // Type-checking and code generation: CPU time, whatever the machine's load.
  if (opts.work_ms > 0) {
    struct timespec t0, t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    swiftlike::FastHash spin;
    std::string seed = digest.HexDigest();
    for (;;) {
      for (int i = 0; i < 256; ++i) spin.Update(seed);
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
      if ((t.tv_sec - t0.tv_sec) * 1000.0 + (t.tv_nsec - t0.tv_nsec) / 1e6 >= opts.work_ms) break;
    }
  }

  std::ostringstream module;
  module << "SWIFTLIKE-MODULE 1\n"
         << "name " << opts.module_name << "\n"
         << "inputs " << inputs.size() << "\n"
         << "sources " << opts.srcs.size() << "\n"
         << "modules " << opts.modules.size() << "\n"
         << "sdk-files " << opts.sdk.size() << "\n"
         << "input-bytes " << total_bytes << "\n"
         << "staged " << (staged_checked ? "verified" : "unchecked") << "\n";
  for (const auto& imp : opts.imports) {
    std::string hex;
    long long bytes = 0;
    if (!HashFile(imp.second, &hex, &bytes)) return 1;
    module << "import " << imp.first << " " << hex << "\n";
  }
  std::string hex = digest.HexDigest();
  module << "digest " << hex << "\n"
         << "end\n";
  std::string module_text = module.str();
  Pad(&module_text, opts.module_pad, hex);

  std::string doc = "SWIFTLIKE-DOC 1\nname " + opts.module_name + "\ndigest " + hex + "\n";
  std::string object = "SWIFTLIKE-OBJECT 1\nname " + opts.module_name + "\n";
  for (const auto& src : opts.srcs) object += "compiled " + src + "\n";
  Pad(&object, opts.module_pad / 2, hex);

  if (!WriteFile(opts.module_out, module_text) || !WriteFile(opts.doc_out, doc) ||
      !WriteFile(opts.object_out, object)) {
    return 1;
  }
  return 0;
}
