// logging.h: fatal-error reporting for clonestage-spawn.
//
// Contract: DIE(fmt, ...) is for failed system calls. It prints
//   clonestage-spawn: FILE:LINE: <message>: <strerror(errno)>
// to stderr and exits with 125 (kExitWrapperFailure) through _exit(), so it
// is safe both in the wrapper and in the forked child before exec. If a
// process group was registered with SetFatalKillGroup(), the group is
// SIGKILLed first: a wrapper that fails never leaves its command running
// unsupervised.

#ifndef CLONESTAGE_CC_LOGGING_H_
#define CLONESTAGE_CC_LOGGING_H_

#include <sys/types.h>

namespace clonestage {

// The program name used as prefix of every message.
constexpr const char kProgramName[] = "clonestage-spawn";

[[noreturn]] void Die(const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

// Registers the process group to SIGKILL if the wrapper dies; 0 clears it.
void SetFatalKillGroup(pid_t pgid);

}  // namespace clonestage

#define DIE(...) ::clonestage::Die(__FILE__, __LINE__, __VA_ARGS__)

#endif  // CLONESTAGE_CC_LOGGING_H_
