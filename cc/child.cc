// child.cc: the child side of clonestage-spawn from fork() to exec(); see
// child.h for the contract.

#include "cc/child.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cc/exit-codes.h"
#include "cc/logging.h"
#include "cc/process-tools.h"

namespace clonestage {
namespace {

int OpenRedirectOrExit(const char* flag, const std::string& path) {
  const int fd = OpenForWriting(path);
  if (fd == -1) {
    fprintf(stderr, "%s: cannot open --%s file '%s': %s\n", kProgramName, flag,
            path.c_str(), strerror(errno));
    exit(kExitWrapperFailure);
  }
  return fd;
}

void MoveTo(int fd, int target) {
  if (fd == -1) {
    return;
  }
  // dup2 clears O_CLOEXEC on target; the original closes at exec.
  while (dup2(fd, target) == -1) {
    if (errno != EINTR) {
      DIE("dup2(%d, %d)", fd, target);
    }
  }
}

}  // namespace

ChildIo OpenChildIo(const Options& opt) {
  ChildIo io;
  if (!opt.stdout_path.empty()) {
    io.stdout_fd = OpenRedirectOrExit("stdout", opt.stdout_path);
  }
  if (!opt.stderr_path.empty()) {
    if (opt.stderr_path == opt.stdout_path) {
      // One file description: both streams append where the other left off.
      io.stderr_fd = io.stdout_fd;
    } else {
      io.stderr_fd = OpenRedirectOrExit("stderr", opt.stderr_path);
    }
  }
  return io;
}

void CloseChildIo(const ChildIo& io) {
  if (io.stdout_fd != -1) {
    CloseOrDie(io.stdout_fd);
  }
  if (io.stderr_fd != -1 && io.stderr_fd != io.stdout_fd) {
    CloseOrDie(io.stderr_fd);
  }
}

void RunChild(const Options& opt, const ChildIo& io) {
  // The wrapper calls setpgid() for the child too; whichever runs first
  // wins, so the wrapper can signal the group as soon as fork() returns.
  if (setpgid(0, 0) == -1) {
    DIE("setpgid(0, 0)");
  }
  ResetSignalsForExec();
  MoveTo(io.stdout_fd, STDOUT_FILENO);
  MoveTo(io.stderr_fd, STDERR_FILENO);

  if (!opt.cwd.empty() && chdir(opt.cwd.c_str()) == -1) {
    fprintf(stderr, "%s: cannot change directory to '%s': %s\n", kProgramName,
            opt.cwd.c_str(), strerror(errno));
    _exit(kExitWrapperFailure);
  }

  execvp(opt.args[0], opt.args.data());
  const int err = errno;
  fprintf(stderr, "%s: cannot execute '%s': %s\n", kProgramName, opt.args[0],
          strerror(err));
  _exit(err == ENOENT || err == ENOTDIR ? kExitNotFound : kExitCannotExecute);
}

}  // namespace clonestage
