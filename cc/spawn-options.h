// spawn-options.h: the command line of clonestage-spawn.
//
// Contract: ParseOptions() either returns a fully validated Options or exits:
// --help prints the usage text to stdout and exits 0; any bad usage (unknown
// option, missing or malformed value, no COMMAND) prints a message and the
// usage text to stderr and exits 125. Paths are kept as given; relative ones
// are resolved against the wrapper's own working directory, never --cwd.

#ifndef CLONESTAGE_CC_SPAWN_OPTIONS_H_
#define CLONESTAGE_CC_SPAWN_OPTIONS_H_

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
  // has ended (see stats.h). Empty: no statistics.
  std::string stats_path;

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
