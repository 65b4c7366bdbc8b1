// process-tools-darwin.cc: the macOS half of process-tools.h.
//
// Contract: macOS has no child subreaper, so a descendant that leaves
// COMMAND's process group (setsid(), setpgid()) and outlives its parent is
// reparented to launchd and cannot be found again; it escapes. What can be
// done is done: when COMMAND ends, KillAndReapAll() SIGKILLs its process
// group until sysctl(KERN_PROC_PGRP) shows no member but the unreaped
// leader, and only then reaps the leader, so the group id cannot be reused
// while it is being killed. Waiting uses kqueue(EVFILT_PROC, NOTE_EXIT),
// which reports the exit without reaping.
//
// Not built on Linux; compiled only on macOS (see cc/BUILD.bazel).

#include <errno.h>
#include <stdlib.h>
#include <sys/event.h>
#include <sys/sysctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vector>

#include "cc/logging.h"
#include "cc/process-tools.h"

namespace clonestage {
namespace {

// Returns the number of processes whose process group is pgid.
size_t CountGroupMembers(pid_t pgid) {
  int mib[] = {CTL_KERN, KERN_PROC, KERN_PROC_PGRP, static_cast<int>(pgid)};
  const u_int mib_len = sizeof(mib) / sizeof(mib[0]);
  for (;;) {
    size_t size = 0;
    if (sysctl(mib, mib_len, nullptr, &size, nullptr, 0) == -1) {
      DIE("sysctl(KERN_PROC_PGRP, %d) size", static_cast<int>(pgid));
    }
    // Room for a few processes started between the two calls.
    size += 8 * sizeof(struct kinfo_proc);
    std::vector<struct kinfo_proc> procs(size / sizeof(struct kinfo_proc));
    size = procs.size() * sizeof(struct kinfo_proc);
    if (sysctl(mib, mib_len, procs.data(), &size, nullptr, 0) == -1) {
      if (errno == ENOMEM) {
        continue;  // The group grew past the extra room; ask again.
      }
      DIE("sysctl(KERN_PROC_PGRP, %d)", static_cast<int>(pgid));
    }
    return size / sizeof(struct kinfo_proc);
  }
}

void SleepOneMillisecond() {
  struct timespec ts = {0, 1000000};
  // An early wake-up (EINTR) is as good as a full sleep here.
  if (nanosleep(&ts, nullptr) == -1 && errno != EINTR) {
    DIE("nanosleep");
  }
}

}  // namespace

bool EnableChildSubreaper() { return false; }

bool RequestParentDeathSignal() { return false; }

void WaitForExitWithoutReaping(pid_t pid) {
  // kqueue descriptors are not inherited by fork(), so no O_CLOEXEC needed.
  const int kq = kqueue();
  if (kq == -1) {
    DIE("kqueue");
  }
  // Registering reports an exit that already happened, so this is not racy.
  struct kevent change;
  EV_SET(&change, static_cast<uintptr_t>(pid), EVFILT_PROC, EV_ADD | EV_ENABLE,
         NOTE_EXIT, 0, nullptr);
  struct kevent event;
  for (;;) {
    const int n = kevent(kq, &change, 1, &event, 1, nullptr);
    if (n == -1) {
      if (errno == EINTR) {
        continue;
      }
      DIE("kevent(EVFILT_PROC, %d)", static_cast<int>(pid));
    }
    if (n == 1 && event.ident == static_cast<uintptr_t>(pid) &&
        (event.fflags & NOTE_EXIT) != 0) {
      break;
    }
  }
  CloseOrDie(kq);
}

int KillAndReapAll(pid_t pid) {
  // Only the unreaped leader left means every other member is gone.
  for (;;) {
    if (kill(-pid, SIGKILL) == -1 && errno != ESRCH) {
      DIE("kill(-%d, SIGKILL)", static_cast<int>(pid));
    }
    if (CountGroupMembers(pid) <= 1) {
      break;
    }
    SleepOneMillisecond();
  }
  int status;
  while (waitpid(pid, &status, 0) == -1) {
    if (errno != EINTR) {
      DIE("waitpid(%d)", static_cast<int>(pid));
    }
  }
  return status;
}

int64_t MaxRssKb(const struct rusage& usage) {
  return static_cast<int64_t>(usage.ru_maxrss) / 1024;  // Bytes on macOS.
}

}  // namespace clonestage
