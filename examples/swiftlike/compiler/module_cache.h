// module_cache.h: the stand-in compiler's implicit module cache, modelled on clang's.
//
// Contract (what it reproduces, and where in clang/LLVM that behaviour lives):
//   - A module is found by name: a system module at
//     <sdkroot>/System/Library/Frameworks/<Name>.framework/Modules/module.modulemap (a path
//     outside every action root, like Xcode's SDK), or a workspace module whose map the
//     action names (an input file, inside the root).
//   - Its cached file is <cache>/<options hash>/<Name>-<hash>.pcm, where <hash> is a hash of
//     the lower-cased canonical path of the module map: the map's directory resolved through
//     symlinks (the framework directory for Modules/ of a .framework), its file name as it
//     is (clang: HeaderSearch::getCachedModuleFileNameImpl and
//     ModuleMap::canonicalizeModuleMapPath). So a stable SDK path hits in every action, and a
//     map inside a freshly staged root (a new directory each time) never hits.
//   - A cached module is used when it is whole (else "fatal error: malformed or corrupted
//     AST file", clang's err_fe_pch_malformed, exit 1) and every input it records (the map
//     and its headers: size and mtime) and every module it imports (content digest) are
//     unchanged; otherwise it is built again.
//   - Building one takes --implicit-module-ms of CPU time (after building what it imports)
//     under a lock shared by every process, as LLVM's LockFileManager does: a unique file
//     "<pcm>.lock-XXXXXX" holding "host pid", hard-linked to "<pcm>.lock"; a lock whose owner
//     is gone (same host, getsid fails with ESRCH) is removed; waiters poll with backoff
//     (10 ms to 500 ms) and then read what the owner wrote. The module is written to a
//     temporary name and renamed into place, so a reader never sees half a file.
//   - Every module the compile needed is reported: loaded, built, or built by another
//     process while this one waited.
// The hash is FastHash, not clang's xxh3: what matters is what it is computed over.
#ifndef SWIFTLIKE_COMPILER_MODULE_CACHE_H_
#define SWIFTLIKE_COMPILER_MODULE_CACHE_H_

#include <map>
#include <string>
#include <vector>

namespace swiftlike {

struct ModuleCacheOptions {
  std::string cache_path;  // -module-cache-path; empty: no implicit modules at all
  std::string sdkroot;     // where system modules live
  std::string target;      // part of the options hash, like clang's module context hash
  long long build_ms = 150;
  long long pcm_bytes = 65536;
  // Workspace modules: name -> module map path (relative to the working directory).
  std::map<std::string, std::string> workspace_maps;
};

struct ModuleEvent {
  std::string name;
  std::string how;  // "loaded", "built", "waited" (built by another process meanwhile)
  std::string pcm;  // the module file's path
};

// Loads or builds `imports` (and everything they import). Returns false, with the reason
// printed on stderr the way clang prints it, on a corrupt module file or a missing module.
bool ImportModules(const ModuleCacheOptions& opts, const std::vector<std::string>& imports,
                   std::vector<ModuleEvent>* events);

}  // namespace swiftlike

#endif  // SWIFTLIKE_COMPILER_MODULE_CACHE_H_
