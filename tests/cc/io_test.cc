// io_test: --cwd, --stdout and --stderr, run as a black box.

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

TEST(IoTest, CommandRunsInCwd) {
  const std::string dir = MakeTempDir();
  const SpawnResult r =
      RunSpawn({"--cwd", dir, "--", "/bin/sh", "-c", "pwd -P > where"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(dir + "/where"), dir + "\n");
}

TEST(IoTest, RelativePathsAreRelativeToWrapperNotCwd) {
  // --cwd applies to COMMAND only; --stdout/--stats stay where the caller
  // (the Rust server) computed them.
  const std::string caller_dir = MakeTempDir();
  const std::string command_dir = MakeTempDir();
  SpawnSettings settings;
  settings.cwd = caller_dir;
  const SpawnResult r = RunSpawn({"--cwd", command_dir, "--stdout", "out.txt",
                                  "--stats", "stats.json", "--", "pwd", "-P"},
                                 settings);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(caller_dir + "/out.txt"), command_dir + "\n");
  EXPECT_TRUE(FileExists(caller_dir + "/stats.json"));
  EXPECT_FALSE(FileExists(command_dir + "/out.txt"));
}

TEST(IoTest, RedirectsStdoutAndStderrToFiles) {
  const std::string dir = MakeTempDir();
  const SpawnResult r =
      RunSpawn({"--stdout", dir + "/out", "--stderr", dir + "/err", "--",
                "/bin/sh", "-c", "echo to-out; echo to-err >&2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(dir + "/out"), "to-out\n");
  EXPECT_EQ(ReadFileOrEmpty(dir + "/err"), "to-err\n");
  // Nothing leaks to the wrapper's own streams.
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST(IoTest, AStdoutPathThatIsASymlinkIsRefusedAndItsTargetUntouched) {
  const std::string dir = MakeTempDir();
  const std::string target = dir + "/precious";
  {
    FILE* f = fopen(target.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("keep", f);
    fclose(f);
  }
  ASSERT_EQ(symlink(target.c_str(), (dir + "/out").c_str()), 0)
      << strerror(errno);
  const SpawnResult r =
      RunSpawn({"--stdout", dir + "/out", "--", "/bin/sh", "-c", "echo evil"});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("cannot open --stdout file"), std::string::npos)
      << r.err;
  EXPECT_EQ(ReadFileOrEmpty(target), "keep");
}

TEST(IoTest, SameFileForStdoutAndStderrKeepsBoth) {
  const std::string path = MakeTempDir() + "/both";
  const SpawnResult r =
      RunSpawn({"--stdout", path, "--stderr", path, "--", "/bin/sh", "-c",
                "echo first; echo second >&2; echo third"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(path), "first\nsecond\nthird\n");
}

TEST(IoTest, RedirectTruncatesExistingFile) {
  const std::string path = MakeTempDir() + "/out";
  WriteFileOrDie(path, std::string(1000, 'x'));
  const SpawnResult r = RunSpawn({"--stdout", path, "--", "echo", "short"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(path), "short\n");
}

TEST(IoTest, RedirectFileIsCreatedWithMode0644) {
  const std::string path = MakeTempDir() + "/out";
  SpawnSettings settings;
  settings.umask = 0;  // So the mode the wrapper asks for shows unmasked.
  const SpawnResult r = RunSpawn({"--stdout", path, "--", "true"}, settings);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST(IoTest, ExecFailureMessageGoesToStderrFile) {
  // The action's stderr is where a user looks for why it failed.
  const std::string err_path = MakeTempDir() + "/err";
  const SpawnResult r =
      RunSpawn({"--stderr", err_path, "--", "clonestage-no-such-command"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(ReadFileOrEmpty(err_path).find("clonestage-no-such-command"),
            std::string::npos);
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
