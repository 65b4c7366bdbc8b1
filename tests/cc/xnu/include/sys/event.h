// sys/event.h of the XNU emulation (tests/cc/xnu): the part of macOS's
// <sys/event.h> that cc/process-tools-darwin.cc uses, declared as XNU does
// (xnu-11215.1.10 bsd/sys/event.h: EVFILT_PROC line 74, struct kevent 94-101,
// EV_SET 115-122, EV_* 144-175, NOTE_EXIT 268, kqueue/kevent 380-384).
// Values match XNU; the struct's packing does not need to (nothing crosses a
// real kernel). Implemented by kevent.cc, on Linux.

#ifndef CLONESTAGE_TESTS_CC_XNU_SYS_EVENT_H_
#define CLONESTAGE_TESTS_CC_XNU_SYS_EVENT_H_

#include <stdint.h>
#include <time.h>

#define EVFILT_PROC (-5)

struct kevent {
  uintptr_t ident;
  int16_t filter;
  uint16_t flags;
  uint32_t fflags;
  intptr_t data;
  void* udata;
};

#define EV_SET(kevp, a, b, c, d, e, f) \
  do {                                 \
    struct kevent* __kevp__ = (kevp);  \
    __kevp__->ident = (a);             \
    __kevp__->filter = (b);            \
    __kevp__->flags = (c);             \
    __kevp__->fflags = (d);            \
    __kevp__->data = (e);              \
    __kevp__->udata = (f);             \
  } while (0)

#define EV_ADD 0x0001
#define EV_ENABLE 0x0004
#define EV_ONESHOT 0x0010
#define EV_CLEAR 0x0020
#define EV_ERROR 0x4000
#define EV_EOF 0x8000

#define NOTE_EXIT 0x80000000u

#ifdef __cplusplus
extern "C" {
#endif

int kqueue(void);
int kevent(int kq, const struct kevent* changelist, int nchanges,
           struct kevent* eventlist, int nevents,
           const struct timespec* timeout);

#ifdef __cplusplus
}
#endif

#endif  // CLONESTAGE_TESTS_CC_XNU_SYS_EVENT_H_
