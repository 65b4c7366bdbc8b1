// supervisor.h: runs COMMAND and watches it until it and everything it
// started are gone.
//
// Contract of RunSupervised():
//  - COMMAND runs in a new process group led by itself.
//  - Timeout: when --timeout expires the group gets SIGTERM, and SIGKILL
//    --kill_delay seconds later if anything in it is still alive.
//  - SIGINT and SIGTERM received by the wrapper are forwarded to the group
//    as they are, followed by the same SIGKILL escalation. A second signal
//    is forwarded again but does not restart the kill delay.
//  - When COMMAND itself has exited, its group and (on Linux, as a child
//    subreaper) every other remaining descendant is SIGKILLed and reaped
//    before RunSupervised() returns; nothing it started outlives it.
//  - Signals that arrive before fork() or while COMMAND starts are held
//    (blocked) and acted on once COMMAND's process group exists.
// Signal handlers only call kill() and setitimer().

#ifndef CLONESTAGE_CC_SUPERVISOR_H_
#define CLONESTAGE_CC_SUPERVISOR_H_

#include <stdint.h>
#include <sys/resource.h>

#include "cc/child.h"
#include "cc/spawn-options.h"

namespace clonestage {

struct RunResult {
  // waitpid() status of COMMAND itself.
  int wait_status = 0;
  // Whether the --timeout expired before COMMAND exited.
  bool timed_out = false;
  // From just before fork() until COMMAND exited, in microseconds.
  int64_t wall_us = 0;
  // getrusage(RUSAGE_CHILDREN) once every descendant has been reaped: the
  // sum over COMMAND and its descendants, max RSS of the largest one.
  struct rusage usage = {};
};

// Runs opt.args with the given redirections and returns once it and all its
// descendants are gone. Closes the descriptors of io in the wrapper.
RunResult RunSupervised(const Options& opt, const ChildIo& io);

}  // namespace clonestage

#endif  // CLONESTAGE_CC_SUPERVISOR_H_
