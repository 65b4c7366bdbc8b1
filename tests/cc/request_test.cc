// request_test: `clonestage-spawn --read_request`, the wrapper started ahead
// of time that reads its directory, arguments and environment from stdin.

#include <string>
#include <vector>

#include "spawn_runner.h"
#include "gtest/gtest.h"

namespace clonestage {
namespace testing {
namespace {

// The request format: N_ARGS, N_ENV, DIR, args..., env..., each NUL-ended.
std::string Request(const std::string& dir,
                    const std::vector<std::string>& args,
                    const std::vector<std::string>& env) {
  std::string r = std::to_string(args.size()) + '\0' +
                  std::to_string(env.size()) + '\0' + dir + '\0';
  for (const std::string& a : args) r += a + '\0';
  for (const std::string& e : env) r += e + '\0';
  return r;
}

SpawnResult RunWithRequest(const std::string& request) {
  const std::string in = MakeTempDir() + "/request";
  WriteFileOrDie(in, request);
  SpawnSettings settings;
  settings.stdin_path = in;
  return RunSpawn({"--read_request"}, settings);
}

TEST(RequestTest, RunsWithTheRequestedDirectoryArgumentsAndEnvironment) {
  const std::string caller_dir = MakeTempDir();
  const std::string command_dir = MakeTempDir();
  const SpawnResult r = RunWithRequest(Request(
      caller_dir,
      {"--cwd", command_dir, "--stdout", "out.txt", "--stats", "-", "--",
       "sh", "-c", "echo \"$FOO $# [$1]\"; pwd -P; exit 3", "x", ""},
      {"PATH=/usr/bin:/bin", "FOO=bar baz"}));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  // Relative --stdout lands in DIR; the command ran in --cwd with exactly
  // the requested environment and arguments (an empty one included).
  EXPECT_EQ(ReadFileOrEmpty(caller_dir + "/out.txt"),
            "bar baz 1 []\n" + command_dir + "\n");
  EXPECT_EQ(JsonValue(ParseFlatJson(r.out), "exit_code"), "3") << r.out;
}

TEST(RequestTest, CommandIsLookedUpInTheRequestedPath) {
  const std::string dir = MakeTempDir();
  const SpawnResult r = RunWithRequest(
      Request(dir, {"--", "true"}, {"PATH=" + dir}));  // no `true` there
  EXPECT_EQ(r.exit_code, 127) << r.err;
}

TEST(RequestTest, CommandGetsDevNullAsStdinNotTheRequest) {
  const std::string dir = MakeTempDir();
  const SpawnResult r = RunWithRequest(Request(
      dir, {"--stdout", "in.txt", "--", "/bin/cat"}, {"PATH=/usr/bin:/bin"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(FileExists(dir + "/in.txt"));
  EXPECT_EQ(ReadFileOrEmpty(dir + "/in.txt"), "");
}

TEST(RequestTest, EmptyRequestExitsZeroWithoutRunningAnything) {
  const SpawnResult r = RunWithRequest("");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST(RequestTest, MalformedRequestsAreRefusedWith125) {
  const std::string dir = MakeTempDir();
  for (const std::string& bad :
       {std::string("no terminator"), std::string("2\0" "0\0", 4),
        Request(dir, {"--", "true"}, {}) + "extra" + '\0',
        std::string("x\0" "0\0", 4) + dir + '\0',
        Request(dir, {}, {}).replace(0, 1, "9")}) {
    const SpawnResult r = RunWithRequest(bad);
    EXPECT_EQ(r.exit_code, 125) << "request: " << bad;
    EXPECT_NE(r.err.find("--read_request"), std::string::npos) << r.err;
  }
}

TEST(RequestTest, MissingDirectoryIsAWrapperFailure) {
  const SpawnResult r = RunWithRequest(
      Request("/nonexistent/dir", {"--", "/bin/true"}, {}));
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("/nonexistent/dir"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace testing
}  // namespace clonestage
