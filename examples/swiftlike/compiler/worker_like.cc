// worker_like: the stand-in for rules_swift's `worker`, the tool every Swift action runs.
//
// Contract: worker_like COMPILER ARGS...
// It execs COMPILER with ARGS, as rules_swift's worker execs swiftc (tools/worker, which
// also rewrites -Xwrapped-swift arguments; this one rewrites nothing). Both are executed
// inputs of every action: the point is that an action runs two staged executables, as a
// real SwiftCompile does (the worker, then swiftc through xcrun).
// Exit codes: the compiler's; 2 bad usage; 127 when COMPILER cannot be executed.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: worker_like COMPILER ARGS...\n");
    return 2;
  }
  execv(argv[1], argv + 1);
  std::fprintf(stderr, "worker_like: cannot execute %s: %s\n", argv[1], std::strerror(errno));
  return 127;
}
