// process-tools-darwin.cc: the macOS half of process-tools.h.
//
// Contract: macOS has no child subreaper, so a descendant that leaves
// COMMAND's process group (setsid(), setpgid()) and outlives its parent is
// reparented to launchd and cannot be found again; it escapes. So does the
// CPU time of every descendant that outlives COMMAND: launchd reaps it, not
// the wrapper. What can be done is done: when COMMAND ends, KillAndReapAll()
// SIGKILLs its process group until sysctl(KERN_PROC_PGRP) shows no member
// that can still run, and only then reaps the leader, so the group id
// cannot be reused while it is being killed. Waiting uses
// kqueue(EVFILT_PROC, NOTE_EXIT), which reports the exit without reaping.
//
// What XNU does here, read in xnu-8019.41.5 (macOS 12.0) and xnu-11215.1.10
// (macOS 15.0); lines given as 8019 / 11215:
//  - EVFILT_PROC cannot be attached to a process that has started exiting:
//    filt_procattach gets ESRCH from proc_find (bsd/kern/kern_event.c:
//    1019-1023 / 1109-1113), which stops finding a process once
//    proc_prepareexit sets P_REF_DEAD (bsd/kern/kern_exit.c:1435 / 2103).
//    A knote attached before that does fire: proc_exit drains every proc
//    ref, the attacher's included, before it posts NOTE_EXIT (kern_exit.c:
//    1518, 1833 / 2200, 2536). So registering is not racy, but an exit that
//    came first is an error, not an event. kevent returns a failed change as
//    an event with EV_ERROR set and the errno in data when the eventlist has
//    room (kern_event.c:7456-7465 / 8189-8198); that event keeps the fflags
//    it was given, NOTE_EXIT, so it must be told apart by EV_ERROR. A signal
//    makes kevent fail with EINTR; it is not restarted (7041-7043 /
//    7758-7760).
//  - kill(-pgid) is killpg1 with posix=1 from libc (libsyscall/wrappers/
//    kill.c:36-39). killpg1 skips zombies (bsd/kern/kern_sig.c:1854 / 1707)
//    and, having signalled nobody, returns EPERM, not ESRCH (1858 / 1711).
//    A zombie stays in its group until it is reaped (reap_child_locked,
//    kern_exit.c:2105 / 2801). So once COMMAND has exited unreaped and its
//    group holds nothing else that runs, kill(-pid) fails with EPERM: the
//    normal end of the cleanup, not a failure. (Bazel's process-wrapper
//    ignores that kill's result: bazel src/main/tools/
//    process-wrapper-legacy.cc:121 at commit 2aa5717c2ba9, and
//    process-tools-darwin.cc:140 at 0582366ce6f1.)
//  - sysctl(KERN_PROC_PGRP) lists zombies too (bsd/kern/kern_sysctl.c:796 /
//    916), each with its p_stat (1070 / 1207). Only members that are not
//    SZOMB are counted: a zombie runs nothing, and one whose parent left the
//    group and never reaps it would otherwise hold the wrapper until that
//    parent ends. (Bazel counts zombies: process-tools-darwin.cc:122.)
//  - Nor are members that have started exiting: killpg1 cannot signal them
//    (pgrp_iterate's proc_find fails once P_REF_DEAD is set, kern_proc.c:
//    3982-3985 at 11215; kern_exit.c:1435 / 2103), so while one tears down
//    a large address space, kill(-pid) already answers EPERM. sysctl marks
//    them P_WEXIT in p_flag (kern_sysctl.c:1015-1016 / 1141-1142), set with
//    P_LEXIT before P_REF_DEAD (kern_exit.c:1201 / 1600). Counting them as
//    live would read that EPERM as "members kill() cannot signal".
//
// Not built on Linux for use; compiled only for macOS (see cc/BUILD.bazel),
// and on Linux for tests against tests/cc/xnu, an emulation of exactly the
// calls above, which tests this model of the kernel, not the kernel.

#include <errno.h>
#include <stdlib.h>
#include <sys/event.h>
#include <sys/proc.h>
#include <sys/sysctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vector>

#include "cc/logging.h"
#include "cc/process-tools.h"

namespace clonestage {
namespace {

// Returns the number of processes in process group pgid that are neither
// zombies (p_stat SZOMB) nor exiting (P_WEXIT), that is, that can still run
// user code.
size_t CountLiveGroupMembers(pid_t pgid) {
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
    size_t live = 0;
    for (size_t i = 0; i < size / sizeof(struct kinfo_proc); ++i) {
      if (procs[i].kp_proc.p_stat != SZOMB &&
          (procs[i].kp_proc.p_flag & P_WEXIT) == 0) {
        ++live;
      }
    }
    return live;
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
  // Registered again after EINTR: EV_ADD of the knote that exists only
  // updates it, and a pending exit is still reported.
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
    if (n != 1 || event.ident != static_cast<uintptr_t>(pid)) {
      errno = EINVAL;
      DIE("kevent(EVFILT_PROC, %d) returned %d event(s), ident %lu",
          static_cast<int>(pid), n, static_cast<unsigned long>(event.ident));
    }
    if ((event.flags & EV_ERROR) != 0) {
      if (event.data == ESRCH) {
        break;  // It exited before it could be watched (see above).
      }
      errno = static_cast<int>(event.data);
      DIE("kevent(EVFILT_PROC, %d) registration", static_cast<int>(pid));
    }
    if ((event.fflags & NOTE_EXIT) == 0) {
      errno = EINVAL;
      DIE("kevent(EVFILT_PROC, %d): event without NOTE_EXIT (fflags %#x)",
          static_cast<int>(pid), static_cast<unsigned>(event.fflags));
    }
    break;
  }
  CloseOrDie(kq);
}

int KillAndReapAll(pid_t pid) {
  // The unreaped leader keeps the group id reserved, so this is safe.
  for (;;) {
    bool signalled = true;
    if (kill(-pid, SIGKILL) == -1) {
      // EPERM: nothing but zombies left to signal (see above). ESRCH: no
      // group, which the unreaped leader rules out; harmless all the same.
      if (errno != EPERM && errno != ESRCH) {
        DIE("kill(-%d, SIGKILL)", static_cast<int>(pid));
      }
      signalled = false;
    }
    const size_t live = CountLiveGroupMembers(pid);
    if (live == 0) {
      break;
    }
    if (!signalled) {
      // Live members that kill() signalled none of: ones this user may not
      // signal. Waiting for them could take forever.
      errno = EPERM;
      DIE("process group %d has %zu live member(s) that kill() cannot signal",
          static_cast<int>(pid), live);
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
