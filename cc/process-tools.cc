// process-tools.cc: the portable half of process-tools.h (signals, timer,
// file descriptors, clock); see there for the contract.

#include "cc/process-tools.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cc/logging.h"

namespace clonestage {

void InstallSignalHandler(int sig, void (*handler)(int), const sigset_t& mask) {
  struct sigaction sa = {};
  sa.sa_handler = handler;
  sa.sa_mask = mask;
  sa.sa_flags = 0;
  if (sigaction(sig, &sa, nullptr) == -1) {
    DIE("sigaction(%d)", sig);
  }
}

sigset_t SetSignalMask(int how, const sigset_t& mask) {
  sigset_t old;
  if (sigprocmask(how, &mask, &old) == -1) {
    DIE("sigprocmask");
  }
  return old;
}

void ResetSignalsForExec() {
  struct sigaction sa = {};
  sa.sa_handler = SIG_DFL;
  if (sigemptyset(&sa.sa_mask) == -1) {
    DIE("sigemptyset");
  }
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) {
      continue;
    }
    // EINVAL: a number the libc reserves for itself (glibc's 32 and 33).
    if (sigaction(sig, &sa, nullptr) == -1 && errno != EINVAL) {
      DIE("sigaction(%d, SIG_DFL)", sig);
    }
  }
  SetSignalMask(SIG_SETMASK, sa.sa_mask);
}

bool ArmTimer(double secs) {
  struct itimerval timer = {};
  // it_interval stays zero: one shot. secs is never negative (options are
  // checked), so truncating is floor(); no libm for the wrapper to load.
  timer.it_value.tv_sec = static_cast<time_t>(secs);
  const double whole = static_cast<double>(timer.it_value.tv_sec);
  timer.it_value.tv_usec = static_cast<suseconds_t>((secs - whole) * 1e6);
  if (secs > 0 && timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) {
    timer.it_value.tv_usec = 1;  // Below 1us: fire now rather than never.
  }
  return setitimer(ITIMER_REAL, &timer, nullptr) == 0;
}

int OpenForWriting(const std::string& path) {
  int fd;
  do {
    fd = open(path.c_str(),
              O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  } while (fd == -1 && errno == EINTR);
  return fd;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n == -1) {
      if (errno == EINTR) {
        continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void CloseOrDie(int fd) {
  // No retry on EINTR: the descriptor is gone either way on Linux and macOS,
  // and retrying could close a descriptor another open() just got.
  if (close(fd) == -1 && errno != EINTR) {
    DIE("close(%d)", fd);
  }
}

int64_t MonotonicMicros() {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) == -1) {
    DIE("clock_gettime(CLOCK_MONOTONIC)");
  }
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace clonestage
