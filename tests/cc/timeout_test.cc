// timeout_test: --timeout and --kill_delay, run as a black box. Timings use
// generous bounds: the machine may be busy with other builds.

#include <signal.h>

#include <string>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

TEST(TimeoutTest, FastCommandIsNotTimedOut) {
  const std::string stats = MakeTempDir() + "/stats.json";
  const SpawnResult r = RunSpawn(
      {"--timeout", "10", "--stats", stats, "--", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.elapsed_secs, 5);
  EXPECT_EQ(JsonValue(ParseFlatJson(ReadFileOrEmpty(stats)), "timed_out"),
            "false");
}

TEST(TimeoutTest, FractionalTimeoutIs124WithSigterm) {
  // Pins fractional parsing: 0.3 must neither become 0 (no timeout, the
  // test would hit the 20 s runner limit) nor round up to 1 s.
  const std::string stats = MakeTempDir() + "/stats.json";
  const SpawnResult r = RunSpawn({"--timeout", "0.3", "--kill_delay", "10",
                                  "--stats", stats, "--", "sleep", "30"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_GE(r.elapsed_secs, 0.29);
  EXPECT_LT(r.elapsed_secs, 0.9);
  const auto json = ParseFlatJson(ReadFileOrEmpty(stats));
  EXPECT_EQ(JsonValue(json, "exit_code"), "124");
  EXPECT_EQ(JsonValue(json, "signal"), std::to_string(SIGTERM));
  EXPECT_EQ(JsonValue(json, "timed_out"), "true");
}

TEST(TimeoutTest, TimeoutSendsSigtermFirst) {
  // A command that handles SIGTERM gets to run its handler, and a clean exit
  // after a timeout is still 124.
  const std::string dir = MakeTempDir();
  const std::string marker = dir + "/got-term";
  const std::string stats = dir + "/stats.json";
  const SpawnResult r = RunSpawn(
      {"--timeout", "0.2", "--kill_delay", "10", "--stats", stats, "--",
       "/bin/sh", "-c",
       "trap 'echo term > " + marker + "; exit 0' TERM; sleep 30 & wait"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_EQ(ReadFileOrEmpty(marker), "term\n");
  // Well before the 10 s kill delay: SIGTERM alone ended it.
  EXPECT_LT(r.elapsed_secs, 5);
  const auto json = ParseFlatJson(ReadFileOrEmpty(stats));
  EXPECT_EQ(JsonValue(json, "signal"), "0");
  EXPECT_EQ(JsonValue(json, "timed_out"), "true");
}

TEST(TimeoutTest, IgnoredSigtermEscalatesToSigkillAfterKillDelay) {
  const std::string stats = MakeTempDir() + "/stats.json";
  const SpawnResult r =
      RunSpawn({"--timeout", "0.2", "--kill_delay", "1", "--stats", stats, "--",
                "/bin/sh", "-c", "trap '' TERM; sleep 30; exit 0"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  // timeout + kill delay, with slack below for clock granularity.
  EXPECT_GE(r.elapsed_secs, 1.15);
  EXPECT_LT(r.elapsed_secs, 6);
  const auto json = ParseFlatJson(ReadFileOrEmpty(stats));
  EXPECT_EQ(JsonValue(json, "signal"), std::to_string(SIGKILL));
  EXPECT_EQ(JsonValue(json, "timed_out"), "true");
}

TEST(TimeoutTest, ZeroKillDelayKillsRightAway) {
  const SpawnResult r =
      RunSpawn({"--timeout", "0.2", "--kill_delay", "0", "--", "/bin/sh", "-c",
                "trap '' TERM; sleep 30; exit 0"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(r.elapsed_secs, 0.9);
}

TEST(TimeoutTest, WorksWhenWrapperStartsWithSigalrmBlocked) {
  // The wrapper's timer is SIGALRM; an inherited blocked mask must not
  // disable it.
  SpawnSettings settings;
  settings.blocked_signal = SIGALRM;
  const SpawnResult r =
      RunSpawn({"--timeout", "0.2", "--kill_delay", "0.2", "--", "sleep", "30"},
               settings);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(r.elapsed_secs, 5);
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
