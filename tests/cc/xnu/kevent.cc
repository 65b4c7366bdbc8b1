// kevent.cc: kqueue() and kevent() for EVFILT_PROC / NOTE_EXIT with XNU's
// semantics, for the wrapper built against the XNU emulation
// (tests/cc/xnu). A kqueue is a real descriptor (of /dev/null, so close()
// works) with at most one knote, the pid it watches.
//
// The model, from bsd/kern/kern_event.c of xnu-8019.41.5 (macOS 12.0) and
// xnu-11215.1.10 (macOS 15.0), lines given as 8019 / 11215:
//  - Attaching (EV_ADD of a new knote) looks the process up with
//    proc_find and fails with ESRCH if it is not found (filt_procattach,
//    1019-1023 / 1109-1113). proc_find stops finding a process as soon as
//    it starts exiting (P_REF_DEAD, kern_exit.c:1435 / 2103), long before
//    it is reaped: so an exited, unreaped child cannot be watched. Here a
//    process "not found" is a zombie or no process in /proc. Attaching
//    earlier is safe on XNU: proc_exit waits for every proc ref, the
//    attacher's included, before it posts NOTE_EXIT (kern_exit.c:1518 and
//    1833 / 2200 and 2536); here the wait below sees any later exit.
//  - EV_ADD of a knote that exists only updates it (kevent_register finds
//    it; no attach), so its pending exit is still reported.
//  - A failed change is returned as an event when there is room in the
//    eventlist: the change itself, flags | EV_ERROR, data = the errno, its
//    fflags (NOTE_EXIT) untouched; kevent then returns without waiting.
//    Without room, kevent fails with that errno (7456-7470 / 8189-8203, and
//    the scan only when noutputs == 0, 7475-7476 / 8208-8209).
//  - Waiting: the exit is reported as ident = pid, fflags NOTE_EXIT
//    (1126 / 1216), flags with EV_CLEAR (set at attach, 1048 / 1138) and
//    EV_EOF | EV_ONESHOT (1132 / 1222); a oneshot knote is dropped once
//    delivered. A signal ends the wait with EINTR, never a restart
//    (7041-7043 / 7758-7760).
//  - Not modelled: other filters and flags, a timeout, two knotes on one
//    kqueue, watching a process that is not the caller's child, kqueues
//    not being inherited by fork().
//
// Test knob: $CLONESTAGE_XNU_ATTACH_AFTER_EXIT=1 makes an attach wait until
// the process has exited, so the EV_ERROR/ESRCH path is taken for certain.
//
// This tests our model of the kernel, not the kernel.

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/event.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xnu/model.h"
#include "xnu/procfs.h"

namespace clonestage {
namespace xnu {
namespace {

struct Kqueue {
  int fd = -1;
  pid_t knote = 0;  // The pid watched, 0 for none.
};

Kqueue g_kqueues[8];

Kqueue* Find(int fd) {
  for (Kqueue& kq : g_kqueues) {
    if (kq.fd == fd) return &kq;
  }
  return nullptr;
}

// Blocks until pid has exited, leaving it unreaped. Returns false with
// errno EINTR when a signal handler ran.
bool WaitForExit(pid_t pid) {
  siginfo_t info;
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) == 0) {
    return true;
  }
  if (errno == ECHILD) {
    NotModelled("EVFILT_PROC on a process that is not the caller's child");
  }
  return false;
}

// filt_procattach: 0, or ESRCH for a process that has exited.
int Attach(Kqueue* kq, pid_t pid) {
  const char* knob = getenv("CLONESTAGE_XNU_ATTACH_AFTER_EXIT");
  if (knob != nullptr && strcmp(knob, "1") == 0) {
    while (!WaitForExit(pid)) {
    }
  }
  ProcEntry entry;
  if (!ReadProc(pid, &entry) || IsZombie(entry)) {
    Trace("kevent: EVFILT_PROC attach to an exited process: ESRCH");
    return ESRCH;
  }
  kq->knote = pid;
  return 0;
}

}  // namespace
}  // namespace xnu
}  // namespace clonestage

extern "C" int kqueue(void) {
  using clonestage::xnu::Kqueue;
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd == -1) {
    return -1;
  }
  // A kqueue closed earlier may have had this number.
  Kqueue* kq = clonestage::xnu::Find(fd);
  if (kq == nullptr) kq = clonestage::xnu::Find(-1);
  if (kq == nullptr) clonestage::xnu::NotModelled("more than 8 kqueues");
  kq->fd = fd;
  kq->knote = 0;
  return fd;
}

extern "C" int kevent(int kq_fd, const struct kevent* changelist, int nchanges,
                      struct kevent* eventlist, int nevents,
                      const struct timespec* timeout) {
  using clonestage::xnu::NotModelled;
  clonestage::xnu::Kqueue* kq = clonestage::xnu::Find(kq_fd);
  if (kq == nullptr) NotModelled("kevent() on a descriptor kqueue() did not return");
  if (timeout != nullptr) NotModelled("kevent() with a timeout");

  int noutputs = 0;
  for (int i = 0; i < nchanges; ++i) {
    struct kevent change = changelist[i];
    if (change.filter != EVFILT_PROC ||
        (change.flags & ~(EV_ADD | EV_ENABLE)) != 0 ||
        (change.flags & EV_ADD) == 0 || change.fflags != NOTE_EXIT) {
      NotModelled("a kevent change but EV_ADD of EVFILT_PROC NOTE_EXIT");
    }
    const pid_t pid = static_cast<pid_t>(change.ident);
    int error = 0;
    if (kq->knote == pid) {
      clonestage::xnu::Trace("kevent: EV_ADD of the existing knote");
    } else if (kq->knote != 0) {
      NotModelled("a second knote on one kqueue");
    } else {
      error = clonestage::xnu::Attach(kq, pid);
    }
    if (error == 0) {
      continue;
    }
    if (noutputs < nevents) {
      change.flags |= EV_ERROR;
      change.data = error;
      eventlist[noutputs++] = change;
    } else {
      errno = error;
      return -1;
    }
  }
  if (noutputs > 0 || nevents == 0) {
    return noutputs;
  }
  if (kq->knote == 0) NotModelled("waiting on a kqueue without a knote");
  if (!clonestage::xnu::WaitForExit(kq->knote)) {
    return -1;  // EINTR.
  }
  struct kevent* event = &eventlist[0];
  EV_SET(event, static_cast<uintptr_t>(kq->knote), EVFILT_PROC,
         EV_ADD | EV_ENABLE | EV_CLEAR | EV_EOF | EV_ONESHOT, NOTE_EXIT, 0,
         nullptr);
  kq->knote = 0;  // EV_ONESHOT: dropped once delivered.
  return 1;
}
