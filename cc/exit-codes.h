// exit-codes.h: the exit codes of clonestage-spawn, in one place.
//
// Contract (also in cc/README.md; the Rust server relies on it):
//   N       COMMAND exited with code N.
//   128+S   COMMAND was killed by signal S (e.g. 137 for SIGKILL).
//   124     the --timeout expired, whatever then ended COMMAND.
//   125     the wrapper itself failed: bad usage, fork failed, a --stdout or
//           --stderr file or the --cwd directory could not be opened, the
//           --stats file could not be written.
//   126     COMMAND was found but could not be executed (EACCES, ENOEXEC...).
//   127     COMMAND was not found (ENOENT, ENOTDIR).
// These follow coreutils' timeout(1) and env(1), so a COMMAND that itself
// exits 124..127 is indistinguishable from the wrapper's own codes; the stats
// file's "timed_out" field disambiguates 124.

#ifndef CLONESTAGE_CC_EXIT_CODES_H_
#define CLONESTAGE_CC_EXIT_CODES_H_

namespace clonestage {

constexpr int kExitTimedOut = 124;
constexpr int kExitWrapperFailure = 125;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;
constexpr int kExitSignalBase = 128;

}  // namespace clonestage

#endif  // CLONESTAGE_CC_EXIT_CODES_H_
