// supervisor.cc: fork, signal forwarding, timeout escalation and final
// cleanup of clonestage-spawn; see supervisor.h for the contract.
//
// All escalation happens inside the signal handlers (SIGALRM for the timer,
// SIGINT/SIGTERM from outside), which only call kill() and setitimer(), so
// no signal can be lost between a check and a blocking wait. The main flow
// just waits for COMMAND's exit and retries on EINTR.

#include "cc/supervisor.h"

#include <errno.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include "cc/logging.h"
#include "cc/process-tools.h"

namespace clonestage {
namespace {

// Where the group is on its way out.
enum Phase : int {
  kRunning = 0,      // Nothing sent yet.
  kTerminating = 1,  // SIGTERM (or the forwarded signal) sent, SIGKILL armed.
  kKilled = 2,       // SIGKILL sent.
};

// Shared with the signal handlers. pgid and kill_delay are written only
// while the handled signals are blocked.
volatile sig_atomic_t g_pgid = 0;
volatile sig_atomic_t g_phase = kRunning;
volatile sig_atomic_t g_timed_out = 0;
double g_kill_delay_secs = 0;

void KillGroup(int sig) {
  // ESRCH: the group is already gone. Nothing better to do in a handler.
  (void)kill(-static_cast<pid_t>(g_pgid), sig);
}

// Sends sig to the group and, the first time, schedules the SIGKILL.
void StartTermination(int sig) {
  KillGroup(sig);
  if (g_phase != kRunning) {
    return;
  }
  if (g_kill_delay_secs > 0 && ArmTimer(g_kill_delay_secs)) {
    g_phase = kTerminating;
  } else {
    // No delay wanted, or no timer to wait with: do not wait at all.
    KillGroup(SIGKILL);
    g_phase = kKilled;
  }
}

void OnTimer(int /*sig*/) {
  const int saved_errno = errno;
  if (g_phase == kRunning) {
    g_timed_out = 1;
    StartTermination(SIGTERM);
  } else if (g_phase == kTerminating) {
    KillGroup(SIGKILL);
    g_phase = kKilled;
  }
  errno = saved_errno;
}

void OnTerminationSignal(int sig) {
  const int saved_errno = errno;
  StartTermination(sig);
  errno = saved_errno;
}

sigset_t HandledSignals() {
  sigset_t set;
  if (sigemptyset(&set) == -1 || sigaddset(&set, SIGALRM) == -1 ||
      sigaddset(&set, SIGINT) == -1 || sigaddset(&set, SIGTERM) == -1) {
    DIE("sigset");
  }
  return set;
}

}  // namespace

RunResult RunSupervised(const Options& opt, const ChildIo& io) {
  const sigset_t handled = HandledSignals();
  SetSignalMask(SIG_BLOCK, handled);

  g_kill_delay_secs = opt.kill_delay_secs;
  InstallSignalHandler(SIGALRM, OnTimer, handled);
  InstallSignalHandler(SIGINT, OnTerminationSignal, handled);
  InstallSignalHandler(SIGTERM, OnTerminationSignal, handled);

  RunResult result;
  const int64_t start_us = MonotonicMicros();
  const pid_t pid = fork();
  if (pid == -1) {
    DIE("fork");
  }
  if (pid == 0) {
    RunChild(opt, io);
  }

  // Also done by the child. EACCES: it already exec'd, so it did it first;
  // ESRCH: it already ended (a failed exec), there is nothing to move.
  if (setpgid(pid, pid) == -1 && errno != EACCES && errno != ESRCH) {
    DIE("setpgid(%d, %d)", static_cast<int>(pid), static_cast<int>(pid));
  }
  g_pgid = pid;
  SetFatalKillGroup(pid);
  CloseChildIo(io);
  if (opt.timeout_secs > 0 && !ArmTimer(opt.timeout_secs)) {
    DIE("setitimer(%g s)", opt.timeout_secs);
  }

  // Signals held so far are delivered here, now that there is a group.
  // Unblocked even if the wrapper inherited them blocked: a blocked SIGALRM
  // would silently disable --timeout.
  SetSignalMask(SIG_UNBLOCK, handled);
  WaitForExitWithoutReaping(pid);
  result.wall_us = MonotonicMicros() - start_us;

  // COMMAND is done: no more escalation, only cleanup.
  SetSignalMask(SIG_BLOCK, handled);
  if (!ArmTimer(0)) {
    DIE("setitimer(0)");
  }
  result.wait_status = KillAndReapAll(pid);
  SetFatalKillGroup(0);
  result.timed_out = g_timed_out != 0;

  if (getrusage(RUSAGE_CHILDREN, &result.usage) == -1) {
    DIE("getrusage(RUSAGE_CHILDREN)");
  }
  return result;
}

}  // namespace clonestage
