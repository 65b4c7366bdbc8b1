// signal_test: SIGTERM/SIGINT sent to clonestage-spawn are forwarded to the
// command's process group, with the kill-delay escalation. Run as a black
// box; each command writes a "ready" file once it is set up, so the signal
// is only sent when the wrapper is supervising it.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

TEST(SignalTest, ForwardsSigtermToCommand) {
  const std::string dir = MakeTempDir();
  const std::string ready = dir + "/ready";
  const std::string marker = dir + "/got-term";
  Spawn spawn({"--kill_delay", "10", "--", "/bin/sh", "-c",
               "trap 'echo term > " + marker + "; exit 7' TERM; echo ok > " +
                   ready + "; sleep 30 & wait"});
  ASSERT_TRUE(WaitForFile(ready));
  ASSERT_EQ(kill(spawn.pid(), SIGTERM), 0);
  const SpawnResult r = spawn.Wait();
  // The wrapper survives the signal and reports how the command ended.
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(marker), "term\n");
  EXPECT_LT(r.elapsed_secs, 5);
}

TEST(SignalTest, ForwardedSigtermEscalatesToSigkill) {
  const std::string dir = MakeTempDir();
  const std::string ready = dir + "/ready";
  const std::string stats = dir + "/stats.json";
  Spawn spawn({"--kill_delay", "0.5", "--stats", stats, "--", "/bin/sh", "-c",
               "trap '' TERM; echo ok > " + ready + "; sleep 30; exit 0"});
  ASSERT_TRUE(WaitForFile(ready));
  const double sent = NowSecs();
  ASSERT_EQ(kill(spawn.pid(), SIGTERM), 0);
  const SpawnResult r = spawn.Wait();
  const double after_signal = NowSecs() - sent;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_GE(after_signal, 0.45);
  EXPECT_LT(after_signal, 5);
  const auto json = ParseFlatJson(ReadFileOrEmpty(stats));
  EXPECT_EQ(JsonValue(json, "signal"), std::to_string(SIGKILL));
  EXPECT_EQ(JsonValue(json, "timed_out"), "false");
}

TEST(SignalTest, ForwardsSigintToCommand) {
  const std::string ready = MakeTempDir() + "/ready";
  Spawn spawn({"--kill_delay", "10", "--", "/bin/sh", "-c",
               "echo ok > " + ready + "; exec sleep 30"});
  ASSERT_TRUE(WaitForFile(ready));
  ASSERT_EQ(kill(spawn.pid(), SIGINT), 0);
  const SpawnResult r = spawn.Wait();
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_LT(r.elapsed_secs, 5);
}

TEST(SignalTest, CommandStartsWithDefaultSignalDispositionsAndMask) {
  // Whatever the wrapper inherited (nohup-style SIG_IGN, a blocked signal)
  // must not leak into COMMAND, or it could not be stopped by that signal.
  SpawnSettings ignoring;
  ignoring.ignored_signal = SIGUSR1;
  const SpawnResult ignored =
      RunSpawn({"--", "/bin/sh", "-c", "kill -USR1 $$; exit 0"}, ignoring);
  EXPECT_EQ(ignored.exit_code, 128 + SIGUSR1) << ignored.err;

  SpawnSettings blocking;
  blocking.blocked_signal = SIGUSR1;
  const SpawnResult blocked =
      RunSpawn({"--", "/bin/sh", "-c", "kill -USR1 $$; exit 0"}, blocking);
  EXPECT_EQ(blocked.exit_code, 128 + SIGUSR1) << blocked.err;
}

TEST(SignalTest, ForwardsSigtermWhenWrapperStartsWithItBlocked) {
  // An inherited blocked mask must not keep the wrapper from forwarding.
  SpawnSettings settings;
  settings.blocked_signal = SIGTERM;
  const std::string ready = MakeTempDir() + "/ready";
  Spawn spawn({"--kill_delay", "10", "--", "/bin/sh", "-c",
               "echo ok > " + ready + "; exec sleep 30"},
              settings);
  ASSERT_TRUE(WaitForFile(ready));
  ASSERT_EQ(kill(spawn.pid(), SIGTERM), 0);
  const SpawnResult r = spawn.Wait();
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
}

TEST(SignalTest, DieWithParentRefusesWhenTheParentIsGone) {
  // PID 1 is not the wrapper's parent (this test is): as if the parent had
  // ended before the wrapper started.
  const std::string marker = MakeTempDir() + "/ran";
  const SpawnResult r = RunSpawn(
      {"--die_with_parent", "1", "--", "/bin/sh", "-c", "echo x > " + marker});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("has ended"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(marker));
  EXPECT_EQ(RunSpawn({"--die_with_parent", "x", "--", "true"}).exit_code, 125);
}

TEST(SignalTest, DieWithParentStopsTheCommandWhenTheParentEndsOnLinuxOnly) {
  // A shell starts the wrapper in the background with its own pid, waits
  // until the command runs and exits: on Linux the wrapper gets SIGTERM
  // (PR_SET_PDEATHSIG) and forwards it, so the command ends within the kill
  // delay. macOS has no parent-death signal: the option is ignored there and
  // the command runs on.
  const std::string dir = MakeTempDir();
  const std::string pid_file = dir + "/pid";
  const std::string script =
      "'" + SpawnPath() + "' --die_with_parent $$ --kill_delay 1 -- /bin/sh -c " +
      "'echo $$ > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file +
      "; exec sleep 30' </dev/null >/dev/null 2>&1 & " +
      "while ! [ -s " + pid_file + " ]; do sleep 0.01; done; exit 0";
  const pid_t sh = fork();
  ASSERT_NE(sh, -1);
  if (sh == 0) {
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(sh, &status, 0), sh);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const pid_t command = ReadPid(pid_file);
  ASSERT_GT(command, 0);
  const double start = NowSecs();
  if (WrapperKernel() == Kernel::kXnu) {
    usleep(500000);
    EXPECT_TRUE(ProcessIsRunning(command)) << "runs on, on macOS";
    (void)kill(command, SIGKILL);
    return;
  }
  while (ProcessExists(command) && NowSecs() - start < 10) {
    usleep(10000);
  }
  EXPECT_FALSE(ProcessExists(command));
  EXPECT_LT(NowSecs() - start, 5);
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
