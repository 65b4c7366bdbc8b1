// spawn_runner.h: runs the clonestage-spawn binary under test as a black box.
//
// The binary's path comes from $CLONESTAGE_SPAWN, set by tests/cc/BUILD.bazel to
// $(rootpath @clonestage//cc:clonestage-spawn) (relative to the test's working
// directory, the runfiles root); it is made absolute so tests can start the
// wrapper from another directory. Scratch files live under $TEST_TMPDIR.
// $CLONESTAGE_SPAWN_KERNEL ("linux" or "xnu") says which kernel's semantics
// the binary runs with: "xnu" for the Darwin build linked with the XNU
// emulation (tests/cc/xnu); unset, the host's.

#ifndef CLONESTAGE_CC_TESTS_SPAWN_RUNNER_H_
#define CLONESTAGE_CC_TESTS_SPAWN_RUNNER_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace clonestage {
namespace testing {

// Absolute path of the clonestage-spawn binary under test.
std::string SpawnPath();

// The kernel semantics the binary under test runs with, where Linux and
// macOS differ: on Linux the wrapper is a child subreaper (it finds, kills
// and reaps descendants that left COMMAND's group or were orphaned) and has
// a parent-death signal; on macOS (XNU) it has neither.
enum class Kernel { kLinux, kXnu };
Kernel WrapperKernel();

// A new empty directory under $TEST_TMPDIR (Bazel removes it afterwards).
std::string MakeTempDir();

std::string ReadFileOrEmpty(const std::string& path);
void WriteFileOrDie(const std::string& path, const std::string& content);
bool FileExists(const std::string& path);

// Polls until path exists and is non-empty; false after timeout_secs.
bool WaitForFile(const std::string& path, double timeout_secs = 10);

// Whether pid still exists (kill(pid, 0); zombies count as existing).
bool ProcessExists(pid_t pid);

// Whether pid exists and is not a zombie: it can still run. An orphan killed
// by the wrapper on macOS is reaped by launchd, not by the wrapper, so it
// may still be a zombie when the wrapper has exited.
bool ProcessIsRunning(pid_t pid);

// Reads a decimal pid written by a test command; -1 if there is none.
pid_t ReadPid(const std::string& path);

// Parses a flat JSON object of numbers and booleans, as --stats writes it,
// into (key, raw value) pairs in file order. Empty on malformed input.
std::vector<std::pair<std::string, std::string>> ParseFlatJson(
    const std::string& json);

// Looks up key in pairs from ParseFlatJson; "" if absent.
std::string JsonValue(
    const std::vector<std::pair<std::string, std::string>>& pairs,
    const std::string& key);

struct SpawnResult {
  int exit_code = -1;   // The wrapper's exit code; -1 if it was signalled.
  int term_signal = 0;  // The signal that killed the wrapper itself, or 0.
  std::string out;      // The wrapper's own stdout.
  std::string err;      // The wrapper's own stderr.
  double elapsed_secs = 0;
};

struct SpawnSettings {
  std::string cwd;         // Working directory of the wrapper; "" = inherit.
  mode_t umask = 022;      // umask of the wrapper.
  int ignored_signal = 0;  // Started with this signal ignored (SIG_IGN).
  int blocked_signal = 0;  // Started with this signal blocked.
  std::string stdin_path = "/dev/null";  // The wrapper's stdin.
};

// One running clonestage-spawn: started by the constructor with
// `SpawnPath() args...`, stdin from settings.stdin_path, stdout and stderr
// captured.
class Spawn {
 public:
  explicit Spawn(const std::vector<std::string>& args,
                 const SpawnSettings& settings = SpawnSettings());
  ~Spawn();
  Spawn(const Spawn&) = delete;
  Spawn& operator=(const Spawn&) = delete;

  pid_t pid() const { return pid_; }

  // Waits for the wrapper to end. A wrapper still running after
  // timeout_secs is SIGKILLed and reported with term_signal = SIGKILL.
  SpawnResult Wait(double timeout_secs = 20);

 private:
  pid_t pid_ = -1;
  std::string out_path_;
  std::string err_path_;
  double start_secs_ = 0;
};

// Spawn(args).Wait().
SpawnResult RunSpawn(const std::vector<std::string>& args,
                     const SpawnSettings& settings = SpawnSettings());

// Seconds on the monotonic clock.
double NowSecs();

}  // namespace testing
}  // namespace clonestage

#endif  // CLONESTAGE_CC_TESTS_SPAWN_RUNNER_H_
