// xnu_emulation_test: the two XNU behaviours the Darwin wrapper must handle,
// taken for certain. Built only against the XNU emulation (tests/cc/xnu,
// target xnu_emulation_test_xnu), whose trace ($CLONESTAGE_XNU_TRACE) shows
// which modelled path a run went through: a test that merely passes could
// have missed the path it is about. This tests our model of the kernel, not
// the kernel.

#include <stdlib.h>

#include <string>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

// Sets an environment variable for the wrappers started in its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(XnuEmulationTest, CleanupOfAGroupOfOnlyTheZombieLeaderIsNotAnError) {
  // COMMAND has exited and is not reaped yet, and nothing else is in its
  // group: XNU's kill(-pgid, SIGKILL) fails with EPERM (killpg1, posix=1).
  // Regression: the wrapper died there with exit 125 after every command.
  const std::string dir = MakeTempDir();
  const std::string trace = dir + "/trace";
  ScopedEnv tracing("CLONESTAGE_XNU_TRACE", trace);
  const SpawnResult r =
      RunSpawn({"--stats", dir + "/stats.json", "--", "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(Has(ReadFileOrEmpty(trace),
                  "kill: process group of zombies only: EPERM"))
      << ReadFileOrEmpty(trace);
  EXPECT_EQ(JsonValue(ParseFlatJson(ReadFileOrEmpty(dir + "/stats.json")),
                      "exit_code"),
            "3");
}

TEST(XnuEmulationTest, ExitBeforeTheKqueueRegistrationIsAnEvErrorEvent) {
  // The emulation's knob holds the registration until COMMAND has exited:
  // XNU refuses to attach EVFILT_PROC to it (filt_procattach: ESRCH) and
  // kevent returns the change as an EV_ERROR event. The wrapper must read
  // that as "exited", and report the exit as usual.
  const std::string dir = MakeTempDir();
  const std::string trace = dir + "/trace";
  ScopedEnv tracing("CLONESTAGE_XNU_TRACE", trace);
  ScopedEnv late("CLONESTAGE_XNU_ATTACH_AFTER_EXIT", "1");
  const SpawnResult r =
      RunSpawn({"--stats", dir + "/stats.json", "--", "/bin/sh", "-c", "exit 5"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_TRUE(Has(ReadFileOrEmpty(trace),
                  "kevent: EVFILT_PROC attach to an exited process: ESRCH"))
      << ReadFileOrEmpty(trace);
  const auto json = ParseFlatJson(ReadFileOrEmpty(dir + "/stats.json"));
  EXPECT_EQ(JsonValue(json, "exit_code"), "5");
  EXPECT_EQ(JsonValue(json, "signal"), "0");
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
