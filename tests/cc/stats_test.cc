// stats_test: the --stats JSON (see cc/stats.h), run as a black box.

#include <dirent.h>

#include <string>
#include <vector>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return names;
  }
  while (const struct dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") {
      names.push_back(name);
    }
  }
  closedir(d);
  return names;
}

long long Number(const std::vector<std::pair<std::string, std::string>>& json,
                 const std::string& key) {
  return std::stoll(JsonValue(json, key));
}

TEST(StatsTest, DashWritesTheStatsToTheWrappersStdout) {
  const std::string dir = MakeTempDir();
  const std::string out = dir + "/out";
  const SpawnResult r = RunSpawn(
      {"--stdout", out, "--stats", "-", "--", "/bin/sh", "-c", "echo hi; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(out), "hi\n");
  const auto json = ParseFlatJson(r.out);
  EXPECT_EQ(JsonValue(json, "exit_code"), "3") << r.out;
  EXPECT_EQ(JsonValue(json, "timed_out"), "false") << r.out;
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"out"});
}

TEST(StatsTest, HasExactlyTheContractKeysInOrder) {
  const std::string stats = MakeTempDir() + "/stats.json";
  const SpawnResult r = RunSpawn({"--stats", stats, "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string text = ReadFileOrEmpty(stats);
  const auto json = ParseFlatJson(text);
  std::vector<std::string> keys;
  for (const auto& pair : json) {
    keys.push_back(pair.first);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"exit_code", "signal", "timed_out",
                                            "wall_us", "user_us", "sys_us",
                                            "max_rss_kb"}))
      << text;
  EXPECT_EQ(JsonValue(json, "exit_code"), "0");
  EXPECT_EQ(JsonValue(json, "signal"), "0");
  EXPECT_EQ(JsonValue(json, "timed_out"), "false");
}

TEST(StatsTest, ValuesAreWithinBounds) {
  const std::string stats = MakeTempDir() + "/stats.json";
  const SpawnResult r = RunSpawn({"--stats", stats, "--", "sleep", "0.3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto json = ParseFlatJson(ReadFileOrEmpty(stats));
  ASSERT_FALSE(json.empty());
  EXPECT_GE(Number(json, "wall_us"), 300000);
  EXPECT_LT(Number(json, "wall_us"), 5000000);
  EXPECT_GT(Number(json, "max_rss_kb"), 0);
  EXPECT_GE(Number(json, "user_us"), 0);
  EXPECT_GE(Number(json, "sys_us"), 0);
  // sleep barely runs: its CPU time is far below its wall time.
  EXPECT_LT(Number(json, "user_us") + Number(json, "sys_us"), 300000);
}

TEST(StatsTest, CountsCpuOfDescendantsKilledAtTheEndOnLinuxOnly) {
  // The busy loop runs in the background and outlives COMMAND. On Linux the
  // wrapper, a subreaper, reaps it at cleanup, so its CPU time is counted;
  // rusage of COMMAND alone would miss it. On macOS it is reparented to
  // launchd when COMMAND exits, launchd reaps it, and its CPU time is not
  // the wrapper's to count (cc/README.md, Stats file).
  // The loop is bounded (several seconds) so that a broken wrapper that
  // fails to kill it does not leave a CPU burner behind.
  const std::string stats = MakeTempDir() + "/stats.json";
  const SpawnResult r = RunSpawn({"--stats", stats, "--", "/bin/sh", "-c",
                                  "i=0; while [ $i -lt 2000000 ]; do "
                                  "i=$((i+1)); done & sleep 0.5; exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto json = ParseFlatJson(ReadFileOrEmpty(stats));
  ASSERT_FALSE(json.empty());
  const long long cpu_us = Number(json, "user_us") + Number(json, "sys_us");
  if (WrapperKernel() == Kernel::kLinux) {
    // Generous: the loop had 0.5 s, but the machine may be busy.
    EXPECT_GE(cpu_us, 50000);
  } else {
    // Only the shell and its `sleep`: a few milliseconds.
    EXPECT_LT(cpu_us, 50000);
  }
}

TEST(StatsTest, WrittenForExecFailureWithoutLeftovers) {
  const std::string dir = MakeTempDir();
  const std::string stats = dir + "/stats.json";
  const SpawnResult r =
      RunSpawn({"--stats", stats, "--", "clonestage-no-such-command"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(JsonValue(ParseFlatJson(ReadFileOrEmpty(stats)), "exit_code"),
            "127");
  // Written through a temporary file that must be renamed away.
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"stats.json"});
}

TEST(StatsTest, UnwritableStatsFileIs125) {
  const std::string bad = MakeTempDir() + "/no-such-dir/stats.json";
  const SpawnResult r = RunSpawn({"--stats", bad, "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
