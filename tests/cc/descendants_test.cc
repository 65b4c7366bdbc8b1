// descendants_test: nothing the command starts outlives clonestage-spawn,
// within what the kernel allows. Run as a black box: the command records a
// descendant's pid in a file, and once the wrapper has exited that pid must
// be gone. On Linux the wrapper, a child subreaper, reaps it itself (a zombie
// would still answer kill(pid, 0)); on macOS an orphan killed by the wrapper
// is reaped by launchd, so "gone" means no longer running, and a descendant
// that left COMMAND's process group escapes (cc/README.md, Cleanup).

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

// Whether a descendant the wrapper killed is not gone yet: on Linux it must
// be reaped too; on macOS launchd reaps it, in its own time.
bool StillThere(pid_t pid) {
  return WrapperKernel() == Kernel::kLinux ? ProcessExists(pid)
                                           : ProcessIsRunning(pid);
}

// Whether a killed descendant is gone within timeout_secs: one tearing down
// a large address space is still there (exiting) for a while.
bool GoneWithin(pid_t pid, double timeout_secs) {
  for (double waited = 0; waited < timeout_secs; waited += 0.01) {
    if (!StillThere(pid)) {
      return true;
    }
    usleep(10 * 1000);
  }
  return !StillThere(pid);
}

// A shell command that starts `script` in a new session (setsid(2)) in the
// background. perl rather than setsid(1), which macOS does not have.
std::string InNewSession(const std::string& script) {
  return "perl -MPOSIX -e 'POSIX::setsid() or die; exec @ARGV' /bin/sh -c '" +
         script + "' &";
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
  EXPECT_FALSE(StillThere(grandchild));
  KillLeftover(grandchild);
}

TEST(DescendantsTest, GrandchildThatLeftTheProcessGroupIsKilledOnLinuxOnly) {
  // Killing the process group is not enough for this one: it is in a new
  // session. Only the subreaper cleanup (Linux) finds it; on macOS, which
  // has no subreaper, it escapes, as documented. The command waits until the
  // grandchild has called setsid() (it writes its pid after) so the group
  // kill cannot get it first.
  const std::string pid_file = MakeTempDir() + "/pid";
  const SpawnResult r = RunSpawn(
      {"--", "/bin/sh", "-c",
       InNewSession("echo $$ > " + pid_file + "; exec sleep 30") +
           " while [ ! -s " + pid_file + " ]; do sleep 0.01; done; exit 0"});
  const pid_t grandchild = ReadPid(pid_file);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Either way the wrapper does not wait for it.
  EXPECT_LT(r.elapsed_secs, 5);
  if (WrapperKernel() == Kernel::kLinux) {
    EXPECT_FALSE(ProcessExists(grandchild));
  } else {
    EXPECT_TRUE(ProcessIsRunning(grandchild)) << "escaped on macOS";
  }
  KillLeftover(grandchild);
}

TEST(DescendantsTest, ZombieWhoseParentLeftTheGroupDoesNotHoldTheWrapper) {
  // A process that leaves the group (setpgid) but keeps a child in it, and
  // never reaps it: once the group is killed, that child is a zombie of the
  // group for as long as its parent lives. It cannot run, so the cleanup
  // must not wait for it. On Linux the subreaper kills the parent (and so
  // reaps the child); on macOS the parent escapes like any process that left
  // the group. Regression: the Darwin cleanup counted every member of the
  // group, zombies included, and waited here until the parent ended.
  const std::string dir = MakeTempDir();
  const std::string child_file = dir + "/child";
  const std::string parent_file = dir + "/parent";
  const std::string leave = dir + "/leave.pl";
  WriteFileOrDie(leave,
                 "use POSIX;\n"
                 "setpgid(0, 0) or die \"setpgid: $!\";\n"
                 "open(my $f, '>', $ARGV[0]) or die; print $f \"$$\\n\"; "
                 "close($f);\n"
                 "sleep 30;\n");
  const SpawnResult r = RunSpawn(
      {"--", "/bin/sh", "-c",
       "( sleep 30 & echo $! > " + child_file + "; exec perl " + leave + " " +
           parent_file + " ) & while [ ! -s " + parent_file +
           " ]; do sleep 0.01; done; exit 0"});
  const pid_t child = ReadPid(child_file);
  const pid_t parent = ReadPid(parent_file);
  ASSERT_GT(child, 0);
  ASSERT_GT(parent, 0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.elapsed_secs, 5);
  EXPECT_FALSE(ProcessIsRunning(child));
  if (WrapperKernel() == Kernel::kLinux) {
    EXPECT_FALSE(ProcessExists(parent));
    EXPECT_FALSE(ProcessExists(child));
  } else {
    EXPECT_TRUE(ProcessIsRunning(parent)) << "escaped on macOS";
  }
  KillLeftover(child);
  KillLeftover(parent);
}

TEST(DescendantsTest, GrandchildStillExitingDoesNotFailTheCleanup) {
  // A backgrounded grandchild holding 256 MiB takes a while (tens of ms) to
  // tear its address space down after the group's SIGKILL. While it does,
  // XNU's kill(-pgid) can no longer find it and answers EPERM, yet sysctl
  // still lists it, not as a zombie but marked P_WEXIT
  // (cc/process-tools-darwin.cc). Regression: the Darwin cleanup counted it
  // as a live member no kill() could signal and exited 125.
  const std::string pid_file = MakeTempDir() + "/pid";
  const SpawnResult r = RunSpawn(
      {"--", "/bin/sh", "-c",
       "perl -e '$x = \"a\" x (1 << 28); open(my $f, \">\", $ARGV[0]) or "
       "die; print $f \"$$\\n\"; close($f); sleep 30' " +
           pid_file + " & while [ ! -s " + pid_file +
           " ]; do sleep 0.01; done; exit 0"});
  const pid_t grandchild = ReadPid(pid_file);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Killed, not waited for (it sleeps 30 s).
  EXPECT_LT(r.elapsed_secs, 20);
  EXPECT_TRUE(GoneWithin(grandchild, 10));
  KillLeftover(grandchild);
}

TEST(DescendantsTest, GrandchildIsKilledOnTimeoutToo) {
  const std::string pid_file = MakeTempDir() + "/pid";
  const SpawnResult r = RunSpawn(
      {"--timeout", "0.2", "--kill_delay", "0.2", "--", "/bin/sh", "-c",
       "trap '' TERM; sleep 30 & echo $! > " + pid_file + "; wait"});
  const pid_t grandchild = ReadPid(pid_file);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_FALSE(StillThere(grandchild));
  KillLeftover(grandchild);
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
