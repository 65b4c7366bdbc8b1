// logging.cc: fatal-error reporting; see logging.h for the contract.

#include "cc/logging.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cc/exit-codes.h"

namespace clonestage {
namespace {

pid_t fatal_kill_group = 0;

}  // namespace

void SetFatalKillGroup(pid_t pgid) { fatal_kill_group = pgid; }

void Die(const char* file, int line, const char* format, ...) {
  const int saved_errno = errno;
  char message[1024];
  va_list ap;
  va_start(ap, format);
  vsnprintf(message, sizeof(message), format, ap);
  va_end(ap);
  // stderr is unbuffered; nothing else is worth flushing on the way out.
  fprintf(stderr, "%s: %s:%d: %s: %s\n", kProgramName, file, line, message,
          strerror(saved_errno));
  if (fatal_kill_group > 0) {
    // Best effort while dying: nothing useful can be done if this fails.
    (void)kill(-fatal_kill_group, SIGKILL);
  }
  _exit(kExitWrapperFailure);
}

}  // namespace clonestage
