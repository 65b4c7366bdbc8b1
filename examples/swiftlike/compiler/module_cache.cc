// module_cache.cc: the implicit module cache of the stand-in compiler. The contract, and
// the clang/LLVM behaviour each part reproduces, are in module_cache.h.
#include "compiler/module_cache.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "compiler/fasthash.h"

namespace swiftlike {
namespace {

std::string Dirname(const std::string& p) {
  size_t s = p.rfind('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : p.substr(0, s);
}

std::string Basename(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// ModuleMap::canonicalizeModuleMapPath: the directory through realpath (the framework
// directory for a framework's Modules/), the file name as it is.
std::string CanonicalMapPath(const std::string& map) {
  std::string dir = Dirname(map);
  std::string rest = Basename(map);
  if (Basename(dir) == "Modules" && EndsWith(Dirname(dir), ".framework")) {
    rest = "Modules/" + rest;
    dir = Dirname(dir);
  }
  char buf[PATH_MAX];
  if (realpath(dir.c_str(), buf) == nullptr) return "";
  return std::string(buf) + "/" + rest;
}

std::string Base36(unsigned long long v) {
  static const char kDigits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[v % 36]);
    v /= 36;
  } while (v != 0);
  return out;
}

unsigned long long Hash64(const std::string& s) {
  FastHash h;
  h.Update(s);
  return std::strtoull(h.HexDigest().substr(0, 16).c_str(), nullptr, 16);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ReadAll(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// "size mtime_ns" of a file, or "" if it cannot be stat'ed.
std::string Stamp(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "";
#if defined(__APPLE__)
  long long ns = static_cast<long long>(st.st_mtimespec.tv_sec) * 1000000000LL +
                 st.st_mtimespec.tv_nsec;
#else
  long long ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
#endif
  return std::to_string(static_cast<long long>(st.st_size)) + " " + std::to_string(ns);
}

double CpuMs() {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

struct Map {
  std::string name;
  std::string path;
  std::string canonical;
  std::vector<std::string> headers;
  std::vector<std::string> imports;
};

// The stand-in's module map: "module NAME", "header REL" (relative to the map's directory),
// "import NAME" lines.
bool ReadMap(const std::string& name, const std::string& path, Map* m) {
  std::string text;
  if (!ReadAll(path, &text)) return false;
  m->name = name;
  m->path = path;
  m->canonical = CanonicalMapPath(path);
  std::istringstream in(text);
  std::string key, value;
  while (in >> key) {
    std::getline(in, value);
    value.erase(0, value.find_first_not_of(' '));
    if (key == "header") m->headers.push_back(Dirname(path) + "/" + value);
    if (key == "import") m->imports.push_back(value);
  }
  return !m->canonical.empty();
}

enum class Found { kValid, kMissing, kStale, kCorrupt };

class Importer {
 public:
  Importer(const ModuleCacheOptions& o, std::vector<ModuleEvent>* events)
      : opts_(o), events_(events) {
    hash_dir_ = opts_.cache_path + "/" + Base36(Hash64("options " + opts_.target + " " +
                                                      opts_.sdkroot));
  }

  // Loads or builds `name`; its content digest into `digest`.
  bool Import(const std::string& name, std::string* digest) {
    auto done = done_.find(name);
    if (done != done_.end()) {
      *digest = done->second;
      return true;
    }
    if (!active_.insert(name).second) {
      std::fprintf(stderr, "error: cyclic dependency in module '%s'\n", name.c_str());
      return false;
    }
    Map m;
    std::string map_path = MapPath(name);
    if (map_path.empty() || !ReadMap(name, map_path, &m)) {
      std::fprintf(stderr, "error: no such module '%s'\n", name.c_str());
      return false;
    }
    std::map<std::string, std::string> deps;
    for (const auto& dep : m.imports) {
      if (!Import(dep, &deps[dep])) return false;
    }
    std::string pcm = hash_dir_ + "/" + name + "-" + Base36(Hash64(Lower(m.canonical))) + ".pcm";
    std::string how;
    if (!LoadOrBuild(m, deps, pcm, digest, &how)) return false;
    events_->push_back({name, how, pcm});
    done_[name] = *digest;
    active_.erase(name);
    return true;
  }

 private:
  std::string MapPath(const std::string& name) {
    auto w = opts_.workspace_maps.find(name);
    if (w != opts_.workspace_maps.end()) return w->second;
    if (opts_.sdkroot.empty()) return "";
    return opts_.sdkroot + "/System/Library/Frameworks/" + name +
           ".framework/Modules/module.modulemap";
  }

  // The module file's state against the map, its headers and the modules it imports.
  Found Check(const Map& m, const std::map<std::string, std::string>& deps,
              const std::string& pcm, std::string* digest) {
    std::string text;
    if (!ReadAll(pcm, &text)) return Found::kMissing;
    if (text.compare(0, 16, "SWIFTLIKE-PCM 1\n") != 0 || !EndsWith(text, "\nend\n")) {
      return Found::kCorrupt;
    }
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream l(line);
      std::string key, a, rest;
      l >> key >> a;
      std::getline(l, rest);
      rest.erase(0, rest.find_first_not_of(' '));
      if (key == "map" && a != m.canonical) return Found::kStale;
      if (key == "input" && Stamp(a) != rest) return Found::kStale;
      if (key == "dep") {
        auto d = deps.find(a);
        if (d == deps.end() || d->second != rest) return Found::kStale;
      }
    }
    FastHash h;
    h.Update(text);
    *digest = h.HexDigest();
    return Found::kValid;
  }

  bool Corrupt(const std::string& pcm) {
    std::fprintf(stderr,
                 "<unknown>:0: error: fatal error: malformed or corrupted AST file: '%s'\n"
                 "<unknown>:0: note: after modifying system headers, please delete the module "
                 "cache at '%s'\n",
                 pcm.c_str(), Dirname(pcm).c_str());
    return false;
  }

  bool LoadOrBuild(const Map& m, const std::map<std::string, std::string>& deps,
                   const std::string& pcm, std::string* digest, std::string* how) {
    switch (Check(m, deps, pcm, digest)) {
      case Found::kValid:
        *how = "loaded";
        return true;
      case Found::kCorrupt:
        return Corrupt(pcm);
      default:
        break;
    }
    if (mkdir(opts_.cache_path.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "error: cannot create module cache %s: %s\n", opts_.cache_path.c_str(),
                   std::strerror(errno));
      return false;
    }
    if (mkdir(hash_dir_.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "error: cannot create %s: %s\n", hash_dir_.c_str(),
                   std::strerror(errno));
      return false;
    }
    std::string lock = pcm + ".lock";
    for (int round = 0; round < 1000; ++round) {
      std::string unique;
      int r = TryLock(lock, &unique);
      if (r < 0) return false;
      if (r == 0) {
        // Another process builds it: wait, then read what it wrote.
        WaitForUnlock(lock);
        Found f = Check(m, deps, pcm, digest);
        if (f == Found::kValid) {
          *how = "waited";
          return true;
        }
        if (f == Found::kCorrupt) return Corrupt(pcm);
        continue;
      }
      // Ours. Someone may have finished it between our look and the lock.
      Found f = Check(m, deps, pcm, digest);
      bool ok = true;
      if (f == Found::kValid) {
        *how = "waited";
      } else {
        ok = Build(m, deps, pcm, digest);
        *how = "built";
      }
      unlink(lock.c_str());
      unlink(unique.c_str());
      return ok;
    }
    std::fprintf(stderr, "error: could not take the lock %s\n", lock.c_str());
    return false;
  }

  static bool OwnerAlive(const std::string& lock) {
    std::string text;
    if (!ReadAll(lock, &text)) return false;
    std::istringstream in(text);
    std::string host;
    long pid = 0;
    if (!(in >> host >> pid)) return false;
    char me[256] = {};
    gethostname(me, sizeof(me) - 1);
    if (host != me) return true;
    return !(getsid(static_cast<pid_t>(pid)) == -1 && errno == ESRCH);
  }

  // 1: locked by us; 0: another live process holds it; -1: error (printed).
  static int TryLock(const std::string& lock, std::string* unique) {
    if (OwnerAlive(lock)) return 0;
    std::string tmpl = lock + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    int fd = mkstemp(buf.data());
    if (fd < 0) {
      std::fprintf(stderr, "error: cannot create %s: %s\n", tmpl.c_str(), std::strerror(errno));
      return -1;
    }
    *unique = buf.data();
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string owner = std::string(host) + " " + std::to_string(getpid());
    bool written = write(fd, owner.data(), owner.size()) == static_cast<ssize_t>(owner.size());
    close(fd);
    if (!written) {
      unlink(unique->c_str());
      std::fprintf(stderr, "error: cannot write %s\n", unique->c_str());
      return -1;
    }
    for (;;) {
      if (link(unique->c_str(), lock.c_str()) == 0) return 1;
      if (errno != EEXIST) {
        std::fprintf(stderr, "error: cannot link %s: %s\n", lock.c_str(), std::strerror(errno));
        unlink(unique->c_str());
        return -1;
      }
      if (OwnerAlive(lock)) {
        unlink(unique->c_str());
        return 0;
      }
      // A lock nobody owns: remove it and try again.
      unlink(lock.c_str());
    }
  }

  static void WaitForUnlock(const std::string& lock) {
    long wait = 10;
    for (int i = 0; i < 400; ++i) {  // at most ~3 minutes
      SleepMs(wait / 2 + std::rand() % (wait / 2 + 1));
      if (access(lock.c_str(), F_OK) != 0 && errno == ENOENT) return;
      if (!OwnerAlive(lock)) return;
      wait = wait * 2 > 500 ? 500 : wait * 2;
    }
  }

  bool Build(const Map& m, const std::map<std::string, std::string>& deps,
             const std::string& pcm, std::string* digest) {
    std::ostringstream out;
    out << "SWIFTLIKE-PCM 1\nmodule " << m.name << "\nmap " << m.canonical << "\n";
    FastHash work;
    std::vector<std::string> inputs = {m.path};
    inputs.insert(inputs.end(), m.headers.begin(), m.headers.end());
    for (const auto& in : inputs) {
      std::string stamp = Stamp(in), text;
      if (stamp.empty() || !ReadAll(in, &text)) {
        std::fprintf(stderr, "%s: error: cannot read '%s' of module '%s'\n", m.path.c_str(),
                     in.c_str(), m.name.c_str());
        return false;
      }
      out << "input " << in << " " << stamp << "\n";
      work.Update(text);
    }
    for (const auto& d : deps) out << "dep " << d.first << " " << d.second << "\n";
    // Parsing and serializing the headers: CPU time, whatever the machine's load.
    const double start = CpuMs();
    std::string salt = work.HexDigest();
    while (CpuMs() - start < static_cast<double>(opts_.build_ms)) {
      for (int i = 0; i < 256; ++i) work.Update(salt);
    }
    std::string body = out.str();
    std::string line = "pad " + work.HexDigest() + "\n";
    while (static_cast<long long>(body.size() + line.size()) + 4 <= opts_.pcm_bytes) body += line;
    body += "end\n";
    std::string tmpl = pcm + ".tmp-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    int fd = mkstemp(buf.data());
    if (fd < 0) {
      std::fprintf(stderr, "error: cannot create %s: %s\n", tmpl.c_str(), std::strerror(errno));
      return false;
    }
    fchmod(fd, 0644);
    size_t done = 0;
    while (done < body.size()) {
      ssize_t n = write(fd, body.data() + done, body.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    bool ok = done == body.size() && close(fd) == 0 && rename(buf.data(), pcm.c_str()) == 0;
    if (!ok) {
      std::fprintf(stderr, "error: cannot write module file %s: %s\n", pcm.c_str(),
                   std::strerror(errno));
      unlink(buf.data());
      return false;
    }
    FastHash h;
    h.Update(body);
    *digest = h.HexDigest();
    return true;
  }

  const ModuleCacheOptions& opts_;
  std::vector<ModuleEvent>* events_;
  std::string hash_dir_;
  std::map<std::string, std::string> done_;
  std::set<std::string> active_;
};

}  // namespace

bool ImportModules(const ModuleCacheOptions& opts, const std::vector<std::string>& imports,
                   std::vector<ModuleEvent>* events) {
  if (opts.cache_path.empty() || imports.empty()) return true;
  Importer importer(opts, events);
  for (const auto& name : imports) {
    std::string digest;
    if (!importer.Import(name, &digest)) return false;
  }
  return true;
}

}  // namespace swiftlike
