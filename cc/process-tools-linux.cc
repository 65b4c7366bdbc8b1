// process-tools-linux.cc: the Linux half of process-tools.h.
//
// Contract: the wrapper is a child subreaper (PR_SET_CHILD_SUBREAPER), so
// every descendant that outlives its parent is reparented to the wrapper
// rather than to init, even one that left the process group with setsid().
// When COMMAND ends, KillAndReapAll() SIGKILLs the group, then repeatedly
// SIGKILLs and reaps whatever direct children remain (listed in
// /proc/thread-self/children) until none is left. Without that file
// (kernels built without CONFIG_PROC_CHILDREN) only the group is killed and
// only already-dead children are reaped, like Bazel's process-wrapper.

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "cc/logging.h"
#include "cc/process-tools.h"

namespace clonestage {
namespace {

// Sends SIGKILL to every direct child of this (single-threaded) process.
// Returns how many were signalled, or -1 if the children cannot be listed.
int KillDirectChildren() {
  int fd;
  do {
    fd = open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC);
  } while (fd == -1 && errno == EINTR);
  if (fd == -1) {
    if (errno == ENOENT) {
      return -1;  // No CONFIG_PROC_CHILDREN or no /proc.
    }
    DIE("open(/proc/thread-self/children)");
  }
  std::string pids;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == -1) {
      if (errno == EINTR) {
        continue;
      }
      DIE("read(/proc/thread-self/children)");
    }
    if (n == 0) {
      break;
    }
    pids.append(buf, static_cast<size_t>(n));
  }
  CloseOrDie(fd);

  // The file is a space-separated list of decimal pids.
  int killed = 0;
  const char* p = pids.c_str();
  for (;;) {
    char* end;
    const long pid = strtol(p, &end, 10);
    if (end == p) {
      break;
    }
    p = end;
    if (pid <= 0) {
      continue;
    }
    // ESRCH: it died (and was reaped) since the file was read.
    if (kill(static_cast<pid_t>(pid), SIGKILL) == -1 && errno != ESRCH) {
      DIE("kill(%ld, SIGKILL)", pid);
    }
    ++killed;
  }
  return killed;
}

void SleepOneMillisecond() {
  struct timespec ts = {0, 1000000};
  // An early wake-up (EINTR) is as good as a full sleep here.
  if (nanosleep(&ts, nullptr) == -1 && errno != EINTR) {
    DIE("nanosleep");
  }
}

}  // namespace

bool EnableChildSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == -1) {
    if (errno == EINVAL) {
      return false;  // Linux before 3.4.
    }
    DIE("prctl(PR_SET_CHILD_SUBREAPER)");
  }
  return true;
}

bool RequestParentDeathSignal() {
  if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) == -1) {
    DIE("prctl(PR_SET_PDEATHSIG)");
  }
  return true;
}

void WaitForExitWithoutReaping(pid_t pid) {
  siginfo_t info;
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) ==
         -1) {
    if (errno != EINTR) {
      DIE("waitid(%d, WNOWAIT)", static_cast<int>(pid));
    }
  }
}

int KillAndReapAll(pid_t pid) {
  // The unreaped leader keeps the group id reserved, so this is safe.
  if (kill(-pid, SIGKILL) == -1 && errno != ESRCH) {
    DIE("kill(-%d, SIGKILL)", static_cast<int>(pid));
  }

  int pid_status = 0;
  bool reaped_pid = false;
  for (;;) {
    // Children still alive now are either in the group (dying already) or
    // escaped it; SIGKILL them all. Each one's own children are reparented
    // to us before it can be reaped, so the next round sees them.
    const int killed = KillDirectChildren();
    if (killed == -1 && !reaped_pid) {
      // Cannot list children: reap at least COMMAND itself.
      pid_t r;
      while ((r = waitpid(pid, &pid_status, 0)) == -1 && errno == EINTR) {
      }
      if (r == -1) {
        DIE("waitpid(%d)", static_cast<int>(pid));
      }
      reaped_pid = true;
      continue;
    }

    int status;
    // Block only while some child is known to be dying; otherwise poll.
    const pid_t r = waitpid(-1, &status, killed > 0 ? 0 : WNOHANG);
    if (r == -1) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == ECHILD) {
        break;  // No children left at all.
      }
      DIE("waitpid(-1)");
    }
    if (r == 0) {
      if (killed == -1) {
        break;  // Children that cannot be listed are left to init.
      }
      // A child we could not see yet (reparented after the listing).
      SleepOneMillisecond();
      continue;
    }
    if (r == pid) {
      pid_status = status;
      reaped_pid = true;
    }
  }
  if (!reaped_pid) {
    errno = ECHILD;
    DIE("child %d vanished before it was reaped", static_cast<int>(pid));
  }
  return pid_status;
}

int64_t MaxRssKb(const struct rusage& usage) {
  return static_cast<int64_t>(usage.ru_maxrss);  // Already in kilobytes.
}

}  // namespace clonestage
