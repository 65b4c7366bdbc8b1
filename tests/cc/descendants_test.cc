// descendants_test: nothing the command starts outlives clonestage-spawn.
// Run as a black box: the command records a descendant's pid in a file, and
// once the wrapper has exited that pid must be gone (killed and reaped; a
// zombie would still answer kill(pid, 0)).

#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <string>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

// Kills a descendant the wrapper failed to kill, so a failing test does not
// leave a sleep behind.
void KillLeftover(pid_t pid) {
  if (pid > 0 && ProcessExists(pid)) {
    (void)kill(pid, SIGKILL);
  }
}

TEST(DescendantsTest, CommandLeadsItsOwnProcessGroup) {
  // Timeouts, forwarded signals and the final cleanup all signal the group.
  const std::string out = MakeTempDir() + "/ids";
  const SpawnResult r = RunSpawn(
      {"--stdout", out, "--", "/bin/sh", "-c", "echo $$ $(ps -o pgid= -p $$)"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream ids(ReadFileOrEmpty(out));
  long pid = 0;
  long pgid = 0;
  ids >> pid >> pgid;
  EXPECT_GT(pid, 0);
  EXPECT_EQ(pgid, pid);
  EXPECT_NE(pgid, static_cast<long>(getpgrp()));
}

TEST(DescendantsTest, BackgroundedGrandchildIsKilled) {
  const std::string pid_file = MakeTempDir() + "/pid";
  const SpawnResult r = RunSpawn(
      {"--", "/bin/sh", "-c", "sleep 30 & echo $! > " + pid_file + "; exit 0"});
  const pid_t grandchild = ReadPid(pid_file);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The wrapper must not wait for the grandchild to finish on its own.
  EXPECT_LT(r.elapsed_secs, 5);
  EXPECT_FALSE(ProcessExists(grandchild));
  KillLeftover(grandchild);
}

#if defined(__linux__)
TEST(DescendantsTest, GrandchildThatLeftTheProcessGroupIsKilled) {
  // Killing the process group is not enough for this one: it is in a new
  // session. Only the subreaper cleanup (Linux) finds it. The command waits
  // until the grandchild has called setsid() (it writes its pid after) so
  // the group kill cannot get it first.
  const std::string pid_file = MakeTempDir() + "/pid";
  const SpawnResult r =
      RunSpawn({"--", "/bin/sh", "-c",
                "setsid /bin/sh -c 'echo $$ > " + pid_file +
                    "; exec sleep 30' & "
                    "while [ ! -s " +
                    pid_file + " ]; do sleep 0.01; done; exit 0"});
  const pid_t grandchild = ReadPid(pid_file);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.elapsed_secs, 5);
  EXPECT_FALSE(ProcessExists(grandchild));
  KillLeftover(grandchild);
}
#endif  // defined(__linux__)

TEST(DescendantsTest, GrandchildIsKilledOnTimeoutToo) {
  const std::string pid_file = MakeTempDir() + "/pid";
  const SpawnResult r = RunSpawn(
      {"--timeout", "0.2", "--kill_delay", "0.2", "--", "/bin/sh", "-c",
       "trap '' TERM; sleep 30 & echo $! > " + pid_file + "; wait"});
  const pid_t grandchild = ReadPid(pid_file);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_FALSE(ProcessExists(grandchild));
  KillLeftover(grandchild);
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
