// child.h: what happens in the forked child between fork() and exec().
//
// Contract: OpenChildIo() runs in the wrapper, before fork, so a --stdout or
// --stderr file that cannot be opened is the wrapper's own failure (125,
// message on the wrapper's stderr). RunChild() runs in the child and never
// returns: it joins a new process group led by itself, resets every signal
// to its default with an empty mask, moves the redirect descriptors onto
// 1 and 2, changes to --cwd, and execs COMMAND (searching PATH as execvp
// does). Its failures are written to the child's stderr, that is, to the
// --stderr file when there is one, where the action's output is read from:
//   clonestage-spawn: cannot execute 'CMD': <strerror>   -> _exit(126/127)
//   clonestage-spawn: cannot change directory to 'DIR': <strerror>  -> 125

#ifndef CLONESTAGE_CC_CHILD_H_
#define CLONESTAGE_CC_CHILD_H_

#include "cc/spawn-options.h"

namespace clonestage {

// Descriptors the child's stdout and stderr go to; -1 means inherit.
// Both are O_CLOEXEC in the wrapper and may be the same descriptor.
struct ChildIo {
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// Opens the --stdout and --stderr files; exits 125 if one cannot be opened.
ChildIo OpenChildIo(const Options& opt);

// Closes the descriptors of io in the wrapper once the child has them.
void CloseChildIo(const ChildIo& io);

// Sets up and execs COMMAND in the child; never returns.
[[noreturn]] void RunChild(const Options& opt, const ChildIo& io);

}  // namespace clonestage

#endif  // CLONESTAGE_CC_CHILD_H_
