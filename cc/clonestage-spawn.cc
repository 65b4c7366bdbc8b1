// clonestage-spawn: runs one command for clonestage's local Remote Execution
// endpoint, with the contract of Bazel's process-wrapper.
//
// Usage: clonestage-spawn [options] -- COMMAND [ARGS...]   (see --help)
//
// COMMAND runs in its own process group. On --timeout the group gets SIGTERM
// and, --kill_delay seconds later, SIGKILL; SIGINT/SIGTERM sent to the
// wrapper are forwarded to the group with the same escalation. When COMMAND
// exits, whatever it left running is killed and reaped (on Linux even
// descendants that left the group, the wrapper being a child subreaper).
//
// Exit codes (also in cc/README.md and exit-codes.h):
//   N       COMMAND exited with code N
//   128+S   COMMAND was killed by signal S
//   124     --timeout expired (whatever signal or exit then ended COMMAND)
//   125     the wrapper failed: bad usage, fork, --stdout/--stderr file,
//           --cwd directory, --stats file
//   126     COMMAND was found but could not be executed
//   127     COMMAND was not found
// With --stats FILE, the JSON described in stats.h is written atomically
// before exiting; its exit_code is the wrapper's exit code.
//
// `clonestage-spawn --read_request` (the only argument) is the same wrapper
// started ahead of time: it reads its directory, arguments and environment
// from stdin (see ReadRequest), then runs exactly as if started with them.
// The server keeps one waiting, so an action does not wait for the wrapper's
// own exec and start-up (~1 ms here). Empty stdin: exit 0, nothing run.

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cc/child.h"
#include "cc/exit-codes.h"
#include "cc/logging.h"
#include "cc/process-tools.h"
#include "cc/spawn-options.h"
#include "cc/stats.h"
#include "cc/supervisor.h"

#include <string>
#include <vector>

extern char** environ;

namespace clonestage {
namespace {

int64_t Micros(const struct timeval& tv) {
  return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec;
}

Stats StatsFor(const RunResult& run) {
  Stats stats;
  if (WIFSIGNALED(run.wait_status)) {
    stats.signal = WTERMSIG(run.wait_status);
  }
  if (run.timed_out) {
    stats.exit_code = kExitTimedOut;
  } else if (WIFSIGNALED(run.wait_status)) {
    stats.exit_code = kExitSignalBase + stats.signal;
  } else {
    stats.exit_code = WEXITSTATUS(run.wait_status);
  }
  stats.timed_out = run.timed_out;
  stats.wall_us = run.wall_us;
  stats.user_us = Micros(run.usage.ru_utime);
  stats.sys_us = Micros(run.usage.ru_stime);
  stats.max_rss_kb = MaxRssKb(run.usage);
  return stats;
}

int Main(int argc, char** argv) {
  const Options opt = ParseOptions(argc, argv);
  if (opt.die_with_parent != 0) {
    // A SIGTERM arriving before RunSupervised() installs its handler ends
    // the wrapper at once, which is right: nothing has been started yet.
    RequestParentDeathSignal();
    if (getppid() != opt.die_with_parent) {
      fprintf(stderr, "%s: the parent process %d has ended; not running %s\n",
              kProgramName, static_cast<int>(opt.die_with_parent), opt.args[0]);
      return kExitWrapperFailure;
    }
  }
  const ChildIo io = OpenChildIo(opt);
  EnableChildSubreaper();
  const RunResult run = RunSupervised(opt, io);
  const Stats stats = StatsFor(run);
  if (!opt.stats_path.empty() && !WriteStatsFile(opt.stats_path, stats)) {
    return kExitWrapperFailure;
  }
  return stats.exit_code;
}

// A request on stdin, read to EOF: NUL-terminated strings
//   N_ARGS, N_ENV (decimal), DIR, then N_ARGS arguments (options, "--",
//   COMMAND...), then N_ENV "NAME=value" entries.
// DIR becomes the wrapper's working directory, the entries its environment.
// Returns false on an empty request (the server closed the pool).
bool ReadRequest(std::string* dir, std::vector<std::string>* args,
                 std::vector<std::string>* env) {
  std::string buf;
  char chunk[65536];
  for (;;) {
    const ssize_t n = read(0, chunk, sizeof(chunk));
    if (n == 0) break;
    if (n == -1) {
      if (errno == EINTR) continue;
      DIE("read(stdin) of --read_request");
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
  if (buf.empty()) return false;
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < buf.size()) {
    const size_t end = buf.find('\0', start);
    if (end == std::string::npos) {
      fprintf(stderr, "%s: --read_request: the request does not end in NUL\n",
              kProgramName);
      exit(kExitWrapperFailure);
    }
    parts.emplace_back(buf, start, end - start);
    start = end + 1;
  }
  char* end_args = nullptr;
  char* end_env = nullptr;
  const unsigned long n_args =
      parts.size() >= 3 ? strtoul(parts[0].c_str(), &end_args, 10) : 0;
  const unsigned long n_env =
      parts.size() >= 3 ? strtoul(parts[1].c_str(), &end_env, 10) : 0;
  if (parts.size() < 3 || end_args == parts[0].c_str() || *end_args != '\0' ||
      end_env == parts[1].c_str() || *end_env != '\0' ||
      parts.size() != 3 + n_args + n_env) {
    fprintf(stderr, "%s: --read_request: malformed request (%zu strings)\n",
            kProgramName, parts.size());
    exit(kExitWrapperFailure);
  }
  *dir = parts[2];
  args->assign(parts.begin() + 3, parts.begin() + 3 + n_args);
  env->assign(parts.begin() + 3 + n_args, parts.end());
  return true;
}

int MainWithRequest(const char* program) {
  std::string dir;
  std::vector<std::string> args;
  std::vector<std::string> env;
  if (!ReadRequest(&dir, &args, &env)) {
    return 0;
  }
  // COMMAND gets /dev/null, as when the wrapper is started directly.
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd == -1 || dup2(null_fd, 0) == -1) {
    DIE("redirecting stdin to /dev/null");
  }
  close(null_fd);
  if (!dir.empty() && chdir(dir.c_str()) == -1) {
    fprintf(stderr, "%s: cannot enter %s: %s\n", kProgramName, dir.c_str(),
            strerror(errno));
    return kExitWrapperFailure;
  }
  // The environment COMMAND runs with (and looks COMMAND up in).
  static std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(&e[0]);
  envp.push_back(nullptr);
  environ = envp.data();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program));
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  return Main(static_cast<int>(argv.size()) - 1, argv.data());
}

}  // namespace
}  // namespace clonestage

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--read_request") == 0) {
    return clonestage::MainWithRequest(argv[0]);
  }
  return clonestage::Main(argc, argv);
}
