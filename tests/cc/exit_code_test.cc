// exit_code_test: clonestage-spawn's exit codes (see cc/exit-codes.h), run
// as a black box. One test per code path.

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include <string>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

TEST(ExitCodeTest, PassesCommandExitCodeThrough) {
  for (int code : {0, 1, 3, 42, 123, 255}) {
    const SpawnResult r =
        RunSpawn({"--", "/bin/sh", "-c", "exit " + std::to_string(code)});
    EXPECT_EQ(r.exit_code, code) << r.err;
  }
}

TEST(ExitCodeTest, CommandOptionsNeedNoSeparator) {
  // "--" is optional: the first non-option is COMMAND and its own flags
  // (here -c) are left to it.
  const SpawnResult r = RunSpawn({"/bin/sh", "-c", "exit 9"});
  EXPECT_EQ(r.exit_code, 9) << r.err;
}

TEST(ExitCodeTest, SignalDeathIs128PlusSignal) {
  const std::string dir = MakeTempDir();
  const std::string stats = dir + "/stats.json";
  const SpawnResult r =
      RunSpawn({"--stats", stats, "--", "/bin/sh", "-c", "kill -USR1 $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGUSR1) << r.err;
  // The wrapper itself must exit, not die of the same signal.
  EXPECT_EQ(r.term_signal, 0);
  const auto json = ParseFlatJson(ReadFileOrEmpty(stats));
  EXPECT_EQ(JsonValue(json, "signal"), std::to_string(SIGUSR1));
  EXPECT_EQ(JsonValue(json, "exit_code"), std::to_string(128 + SIGUSR1));
  EXPECT_EQ(JsonValue(json, "timed_out"), "false");
}

TEST(ExitCodeTest, CommandNotFoundIs127WithMessage) {
  const SpawnResult r = RunSpawn({"--", "clonestage-no-such-command"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("clonestage-no-such-command"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(strerror(ENOENT)), std::string::npos) << r.err;
}

TEST(ExitCodeTest, MissingPathIs127) {
  const std::string missing = MakeTempDir() + "/missing/tool";
  const SpawnResult r = RunSpawn({"--", missing});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

TEST(ExitCodeTest, NotExecutableIs126WithMessage) {
  const std::string script = MakeTempDir() + "/not-executable.sh";
  WriteFileOrDie(script, "#!/bin/sh\nexit 0\n");
  ASSERT_EQ(chmod(script.c_str(), 0644), 0);
  const SpawnResult r = RunSpawn({"--", script});
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_NE(r.err.find(script), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(strerror(EACCES)), std::string::npos) << r.err;
}

TEST(ExitCodeTest, BadUsageIs125WithUsage) {
  const std::vector<std::vector<std::string>> bad = {
      {"--no-such-option", "--", "true"},
      {},      // No COMMAND.
      {"--"},  // No COMMAND after "--".
      {"--timeout", "soon", "--", "true"},
      {"--timeout", "-1", "--", "true"},
      {"--timeout", "nan", "--", "true"},
      {"--kill_delay", "5s", "--", "true"},
      {"--stdout", "", "--", "true"},
      {"--stats"},  // Missing value.
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& arg : args) {
      joined += " '" + arg + "'";
    }
    const SpawnResult r = RunSpawn(args);
    EXPECT_EQ(r.exit_code, 125) << joined;
    EXPECT_NE(r.err.find("Usage: clonestage-spawn"), std::string::npos)
        << joined << ": " << r.err;
  }
}

TEST(ExitCodeTest, HelpPrintsUsageAndExits0) {
  const SpawnResult r = RunSpawn({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--cwd", "--timeout", "--kill_delay", "--stdout",
                           "--stderr", "--stats", "124", "125", "126", "127"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(r.err, "");
}

TEST(ExitCodeTest, UnopenableRedirectIs125AndCommandDoesNotRun) {
  const std::string dir = MakeTempDir();
  const std::string marker = dir + "/ran";
  const std::string bad = dir + "/no-such-dir/out.txt";
  const SpawnResult r =
      RunSpawn({"--stdout", bad, "--", "/bin/sh", "-c", "echo x > " + marker});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(marker));
}

TEST(ExitCodeTest, MissingCwdIs125) {
  const std::string missing = MakeTempDir() + "/no-such-dir";
  const SpawnResult r = RunSpawn({"--cwd", missing, "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
