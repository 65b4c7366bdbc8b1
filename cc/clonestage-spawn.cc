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

#include <stdio.h>
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

}  // namespace
}  // namespace clonestage

int main(int argc, char** argv) { return clonestage::Main(argc, argv); }
