// spawn-options.cc: parses the command line of clonestage-spawn with
// getopt_long; see spawn-options.h for the contract.

#include "cc/spawn-options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "cc/exit-codes.h"
#include "cc/logging.h"

namespace clonestage {

const char kUsage[] =
    "Usage: clonestage-spawn [options] -- COMMAND [ARGS...]\n"
    "\n"
    "Runs COMMAND in its own process group and exits with its exit code,\n"
    "like Bazel's process-wrapper. When COMMAND ends, whatever it left\n"
    "running is killed.\n"
    "\n"
    "Options:\n"
    "  --cwd DIR          run COMMAND in DIR (other paths stay relative to\n"
    "                     the wrapper's own working directory)\n"
    "  --timeout SECS     SIGTERM the process group after SECS seconds,\n"
    "                     fractions allowed; 0 = no timeout (default)\n"
    "  --kill_delay SECS  seconds from SIGTERM to SIGKILL after a timeout or\n"
    "                     a forwarded SIGINT/SIGTERM (default 5)\n"
    "  --stdout FILE      send COMMAND's stdout to FILE (created or\n"
    "                     truncated, mode 0644)\n"
    "  --stderr FILE      send COMMAND's stderr to FILE (may be the same\n"
    "                     FILE as --stdout)\n"
    "  --stats FILE       on exit, atomically write to FILE the JSON object\n"
    "                     {\"exit_code\": N, \"signal\": N, \"timed_out\": B,\n"
    "                     \"wall_us\": N, \"user_us\": N, \"sys_us\": N,\n"
    "                     \"max_rss_kb\": N}; FILE - writes it to stdout\n"
    "  --die_with_parent PID\n"
    "                     PID is the wrapper's parent; when it ends, act as on\n"
    "                     SIGTERM (Linux; ignored on macOS). Exits 125 without\n"
    "                     running COMMAND if PID is not the parent any more\n"
    "  -h, --help         print this text and exit 0\n"
    "\n"
    "clonestage-spawn --read_request (alone) starts ahead of time and reads\n"
    "its working directory, arguments and environment from stdin: the\n"
    "NUL-terminated strings N_ARGS, N_ENV, DIR, N_ARGS arguments as above,\n"
    "N_ENV NAME=value entries. An empty stdin exits 0 without running anything.\n"
    "\n"
    "Exit codes:\n"
    "  N      COMMAND exited with code N\n"
    "  128+S  COMMAND was killed by signal S\n"
    "  124    the timeout expired\n"
    "  125    the wrapper failed (bad usage, fork, redirect file, --cwd,\n"
    "         stats file)\n"
    "  126    COMMAND was found but could not be executed\n"
    "  127    COMMAND was not found\n";

namespace {

[[noreturn]] __attribute__((format(printf, 1, 2))) void BadUsage(
    const char* format, ...) {
  fprintf(stderr, "%s: ", kProgramName);
  va_list ap;
  va_start(ap, format);
  vfprintf(stderr, format, ap);
  va_end(ap);
  fprintf(stderr, "\n\n%s", kUsage);
  exit(kExitWrapperFailure);
}

// Longest accepted duration (about 31 years): keeps the value far inside
// time_t and struct timeval, and anything larger is a typo.
constexpr double kMaxSeconds = 1e9;

double ParseSeconds(const char* flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  const double secs = strtod(value, &end);
  if (end == value || *end != '\0' || errno != 0 || !isfinite(secs) ||
      secs < 0 || secs > kMaxSeconds) {
    BadUsage("--%s wants a number of seconds from 0 to 1e9, got '%s'", flag,
             value);
  }
  return secs;
}

pid_t ParsePid(const char* flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  const long pid = strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno != 0 || pid <= 0 ||
      pid != static_cast<pid_t>(pid)) {
    BadUsage("--%s wants a process id, got '%s'", flag, value);
  }
  return static_cast<pid_t>(pid);
}

std::string NonEmpty(const char* flag, const char* value) {
  if (value[0] == '\0') {
    BadUsage("--%s wants a non-empty path", flag);
  }
  return value;
}

enum Flag {
  kCwd = 256,
  kTimeout,
  kKillDelay,
  kStdout,
  kStderr,
  kStats,
  kDieWithParent,
};

}  // namespace

Options ParseOptions(int argc, char** argv) {
  static const struct option kLongOptions[] = {
      {"cwd", required_argument, nullptr, kCwd},
      {"timeout", required_argument, nullptr, kTimeout},
      {"kill_delay", required_argument, nullptr, kKillDelay},
      {"stdout", required_argument, nullptr, kStdout},
      {"stderr", required_argument, nullptr, kStderr},
      {"stats", required_argument, nullptr, kStats},
      {"die_with_parent", required_argument, nullptr, kDieWithParent},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };

  Options opt;
  // "+": stop at the first non-option, so COMMAND's own flags are left alone
  // even without "--". getopt_long prints its own message for unknown
  // options and missing values.
  int c;
  while ((c = getopt_long(argc, argv, "+h", kLongOptions, nullptr)) != -1) {
    switch (c) {
      case kCwd:
        opt.cwd = NonEmpty("cwd", optarg);
        break;
      case kTimeout:
        opt.timeout_secs = ParseSeconds("timeout", optarg);
        break;
      case kKillDelay:
        opt.kill_delay_secs = ParseSeconds("kill_delay", optarg);
        break;
      case kStdout:
        opt.stdout_path = NonEmpty("stdout", optarg);
        break;
      case kStderr:
        opt.stderr_path = NonEmpty("stderr", optarg);
        break;
      case kStats:
        opt.stats_path = NonEmpty("stats", optarg);
        break;
      case kDieWithParent:
        opt.die_with_parent = ParsePid("die_with_parent", optarg);
        break;
      case 'h':
        fputs(kUsage, stdout);
        if (fflush(stdout) != 0) {
          DIE("writing the usage text to stdout");
        }
        exit(0);
      default:
        // getopt_long already said what was wrong.
        fprintf(stderr, "\n%s", kUsage);
        exit(kExitWrapperFailure);
    }
  }

  if (optind >= argc) {
    BadUsage("no COMMAND given");
  }
  for (int i = optind; i < argc; ++i) {
    opt.args.push_back(argv[i]);
  }
  opt.args.push_back(nullptr);
  return opt;
}

}  // namespace clonestage
