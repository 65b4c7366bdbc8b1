// kill.cc: kill(2) with XNU's semantics, for the wrapper built against the
// XNU emulation (tests/cc/xnu). Linked with -Wl,--wrap=kill (BUILD.bazel),
// so every kill() in the wrapper's own objects lands in __wrap_kill, and
// __real_kill is glibc's.
//
// The model, from xnu-8019.41.5 (macOS 12.0) and xnu-11215.1.10 (macOS
// 15.0), lines given as 8019 / 11215, bsd/kern/kern_sig.c unless named:
//  - libc's kill() asks for POSIX behaviour: __kill(pid, sig, 1)
//    (libsyscall/wrappers/kill.c:36-39, with __DARWIN_UNIX03 = 1 for any
//    deployment target from 10.5 on, bsd/sys/cdefs.h:796-800 at 11215).
//  - pid > 0: a zombie is signalled "successfully" (pzfind, 1535 / 1388),
//    as on Linux, so the call goes to the real kill().
//  - pid < -1 is killpg1(-pid) (1561 / 1414). No group: ESRCH (pgrp_find,
//    1845-1848 / 1695-1698). A zombie stays in its group until it is reaped
//    (reap_child_locked calls pgrp_leave_locked, kern_exit.c:2105 / 2801),
//    so a group of zombies only still exists. Zombies (SZOMB) are skipped
//    (1854 / 1707), every other member is signalled, and if none was, the
//    answer is EPERM, not ESRCH, because posix is 1 (1858 / 1711). This is
//    what Linux does not do: it signals the zombies and returns 0.
//  - A member that has started exiting but is not a zombie yet is skipped
//    too: pgrp_iterate looks each member up with proc_find (kern_proc.c:
//    3982-3985 at 11215), which fails once proc_prepareexit has set
//    P_REF_DEAD (kern_exit.c:1435 / 2103), right after exit set P_LEXIT
//    (1201 / 1600). Modelled as Linux's PF_EXITING; the window between the
//    two flags is not.
//  - Not modelled (the wrapper does not use them): pid 0 and -1, and the
//    permission check (cansignal): the wrapper signals only its own
//    command's group, of its own uid.
//
// This tests our model of the kernel, not the kernel.

#include <errno.h>
#include <signal.h>
#include <sys/types.h>

#include "xnu/model.h"
#include "xnu/procfs.h"

extern "C" int __real_kill(pid_t pid, int sig);

namespace clonestage {
namespace xnu {
namespace {

struct GroupCount {
  int live = 0;
  int zombies = 0;
  int exiting = 0;
};

void CountMember(const ProcEntry& entry, void* arg) {
  GroupCount* count = static_cast<GroupCount*>(arg);
  if (IsZombie(entry)) {
    ++count->zombies;
  } else if (entry.exiting) {
    ++count->exiting;
  } else {
    ++count->live;
  }
}

}  // namespace

int Kill(pid_t pid, int sig) {
  if (pid > 0) {
    return __real_kill(pid, sig);
  }
  if (pid == 0 || pid == -1) {
    NotModelled(pid == 0 ? "kill(0, sig)" : "kill(-1, sig)");
  }
  GroupCount count;
  if (ForEachGroupMember(-pid, CountMember, &count) == -1) {
    NotModelled("kill() without a readable /proc");
  }
  if (count.live == 0 && count.zombies == 0 && count.exiting == 0) {
    Trace("kill: no such process group: ESRCH");
    errno = ESRCH;
    return -1;
  }
  if (count.live == 0) {
    Trace(count.exiting == 0
              ? "kill: process group of zombies only: EPERM"
              : "kill: process group of zombies and exiting members: EPERM");
    errno = EPERM;
    return -1;
  }
  // Linux signals the zombies too, harmlessly; the live members get it as
  // on XNU.
  return __real_kill(pid, sig);
}

}  // namespace xnu
}  // namespace clonestage

extern "C" int __wrap_kill(pid_t pid, int sig) {
  return clonestage::xnu::Kill(pid, sig);
}
