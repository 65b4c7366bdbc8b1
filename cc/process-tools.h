// process-tools.h: system-call helpers shared by clonestage-spawn's parts.
//
// Contract: every function either succeeds or DIEs (exit 125, naming
// file:line and errno), except where a return value says otherwise. EINTR is
// retried explicitly. Descriptors are opened with O_CLOEXEC.
//
// The second half is implemented once per OS, in process-tools-linux.cc and
// process-tools-darwin.cc (chosen by select() in cc/BUILD.bazel): everything
// about waiting for and killing descendants differs between the two.

#ifndef CLONESTAGE_CC_PROCESS_TOOLS_H_
#define CLONESTAGE_CC_PROCESS_TOOLS_H_

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <string>

namespace clonestage {

// ---- Portable (process-tools.cc) ----

// Installs handler for sig, blocking every signal in `mask` while it runs.
// No SA_RESTART: blocking calls return EINTR so callers see the signal.
void InstallSignalHandler(int sig, void (*handler)(int), const sigset_t& mask);

// Sets the signal mask with sigprocmask(how, ...); returns the old mask.
sigset_t SetSignalMask(int how, const sigset_t& mask);

// For the child before exec: every signal back to SIG_DFL (ignored ones
// too) and an empty signal mask, so COMMAND starts from a clean slate.
void ResetSignalsForExec();

// (Re)arms the one-shot ITIMER_REAL timer to deliver SIGALRM in `secs`
// seconds; 0 disarms it. Only calls setitimer(), so it is usable from a
// signal handler; failures are ignored there (see the return value).
bool ArmTimer(double secs);

// Opens path for writing (created or truncated, mode 0644, O_CLOEXEC), never
// through a symlink in its last component (O_NOFOLLOW: the server makes these
// files ahead of time in work dirs an action of the same uid could reach; a
// symlink planted there must not redirect the next action's output).
// Returns -1 with errno set on failure, for the caller to report.
int OpenForWriting(const std::string& path);

// Writes all of data to fd. Returns false with errno set on failure.
bool WriteAll(int fd, const char* data, size_t size);

// Closes fd, which the caller owns; DIEs on failure.
void CloseOrDie(int fd);

// Microseconds on the monotonic clock.
int64_t MonotonicMicros();

// ---- Per OS (process-tools-<os>.cc) ----

// Makes this process a child subreaper, so orphaned descendants are
// reparented to it instead of to init. Returns false where the OS has no
// such feature (macOS; Linux before 3.4).
bool EnableChildSubreaper();

// Asks for SIGTERM when the parent (thread) that started this process ends.
// Returns false where the OS has no such feature (macOS). Afterwards the
// caller checks getppid(): a parent that ended before the request was made
// is not signalled.
bool RequestParentDeathSignal();

// Blocks until the child `pid` has exited, without reaping it: the zombie
// keeps its pid and so its process group id reserved, so killing -pid can
// never hit an unrelated group. Retries on EINTR, so signal handlers run
// while it waits.
void WaitForExitWithoutReaping(pid_t pid);

// After WaitForExitWithoutReaping(pid): SIGKILLs the process group pid and
// every other remaining descendant this process can find, reaps them all,
// and returns the wait status of `pid` itself.
int KillAndReapAll(pid_t pid);

// ru_maxrss in kilobytes (Linux reports kilobytes, macOS bytes).
int64_t MaxRssKb(const struct rusage& usage);

}  // namespace clonestage

#endif  // CLONESTAGE_CC_PROCESS_TOOLS_H_
