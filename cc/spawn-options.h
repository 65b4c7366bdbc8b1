// spawn-options.h: the command line of clonestage-spawn.
//
// Contract: ParseOptions() either returns a fully validated Options or exits:
// --help prints the usage text to stdout and exits 0; any bad usage (unknown
// option, missing or malformed value, no COMMAND) prints a message and the
// usage text to stderr and exits 125. Paths are kept as given; relative ones
// are resolved against the wrapper's own working directory, never --cwd.

#ifndef CLONESTAGE_CC_SPAWN_OPTIONS_H_
#define CLONESTAGE_CC_SPAWN_OPTIONS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace clonestage {

struct Options {
  // --cwd: directory the command is executed in (the wrapper itself does not
  // change directory). Empty: inherit the wrapper's working directory.
  std::string cwd;

  // --timeout: seconds after which the command's process group gets SIGTERM,
  // and SIGKILL kill_delay_secs later. Fractional values are allowed; 0 (the
  // default) means no timeout.
  double timeout_secs = 0;

  // --kill_delay: grace period in seconds between SIGTERM and SIGKILL, both
  // on timeout and after a forwarded SIGINT/SIGTERM. 0 sends SIGKILL right
  // after SIGTERM. Recommended: the default, 5 (Bazel's value), which lets
  // compilers and test runners flush their output.
  double kill_delay_secs = 5;

  // --stdout / --stderr: files the command's output goes to, created or
  // truncated with mode 0644 (minus umask). The same path for both shares
  // one file description, so the two streams interleave instead of
  // overwriting each other. Empty: inherit the wrapper's descriptor.
  std::string stdout_path;
  std::string stderr_path;

  // --stats: file to write the resource statistics JSON to when the command
  // has ended (see stats.h); "-" writes it to the wrapper's own stdout (use
  // with --stdout, or COMMAND's output mixes with it). Empty: no statistics.
  std::string stats_path;

  // --die_with_parent: the pid of the process starting the wrapper. When it
  // ends, the wrapper gets SIGTERM (Linux PR_SET_PDEATHSIG; forwarded to the
  // command like any SIGTERM); if the wrapper's parent is not this pid when
  // the wrapper starts, it has ended already and the wrapper exits 125
  // without running the command. 0 (the default): not wanted. No effect on
  // macOS, which has no such signal.
  pid_t die_with_parent = 0;

  // COMMAND and its arguments, followed by a nullptr as execvp() wants.
  // The strings point into argv.
  std::vector<char*> args;
};

// The usage text printed by --help and on bad usage.
extern const char kUsage[];

// Parses argv as described above; exits on --help or bad usage.
Options ParseOptions(int argc, char** argv);

}  // namespace clonestage

#endif  // CLONESTAGE_CC_SPAWN_OPTIONS_H_
