#include "core/sync.h"
#include "core/subprocess.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Generous: these bound hangs on a loaded 2-core machine, they are not expected durations.
constexpr absl::Duration kTimeout = absl::Seconds(20);

std::unique_ptr<Subprocess> StartShell(const std::string& script, std::map<std::string, std::string> env = {}) {
  Subprocess::Options options;
  options.argv = {"/bin/sh", "-c", script};
  options.env = std::move(env);
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(std::move(options));
  EXPECT_TRUE(proc.ok()) << proc.status();
  return proc.ok() ? std::move(*proc) : nullptr;
}

TEST(SubprocessTest, WaitForLineFindsLine) {
  // `exec` keeps the pid ours: a plain `sleep` would be a grandchild that outlives the kill.
  auto proc = StartShell("echo starting; echo 'listening on port 42'; exec sleep 60");
  ASSERT_NE(proc, nullptr);
  EXPECT_GT(proc->pid(), 0);
  absl::StatusOr<std::string> line = proc->WaitForLine("listening on", kTimeout);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "listening on port 42");
  EXPECT_TRUE(proc->running());
  // A line printed before the call is found too.
  absl::StatusOr<std::string> earlier = proc->WaitForLine("starting", kTimeout);
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  EXPECT_EQ(*earlier, "starting");
}

TEST(SubprocessTest, WaitReturnsExitCode) {
  auto proc = StartShell("echo bye; exit 3");
  ASSERT_NE(proc, nullptr);
  absl::StatusOr<int> code = proc->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 3);
  EXPECT_FALSE(proc->running());
  // Waiting again returns the same code at once.
  EXPECT_EQ(*proc->Wait(absl::ZeroDuration()), 3);

  auto ok = StartShell("true");
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(*ok->Wait(kTimeout), 0);
}

TEST(SubprocessTest, WaitReturnsOnlyAfterEveryLineIsRead) {
  // The last lines are written just before exit; Wait used to return once the child was
  // reaped, and output() read right after it could miss them. Repeat to give the race room.
  for (int round = 0; round < 20; ++round) {
    auto proc = StartShell("i=0; while [ $i -lt 200 ]; do echo line$i; i=$((i+1)); done; echo last; exit 4");
    ASSERT_NE(proc, nullptr);
    // Poll running() first: it reaps the child as soon as it exits, the order that lost lines.
    const absl::Time deadline = absl::Now() + kTimeout;
    while (proc->running() && absl::Now() < deadline) {
    }
    absl::StatusOr<int> code = proc->Wait(kTimeout);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 4);
    std::vector<std::string> lines = absl::StrSplit(proc->output(), '\n');
    ASSERT_EQ(lines.size(), 201u) << "round " << round;
    EXPECT_EQ(lines.back(), "last");
  }
}

TEST(SubprocessTest, KilledBySignalGives128PlusSignal) {
  auto proc = StartShell("echo up; exec sleep 60");
  ASSERT_NE(proc, nullptr);
  ASSERT_TRUE(proc->WaitForLine("up", kTimeout).ok());
  proc->Signal(SIGKILL);
  absl::StatusOr<int> code = proc->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGKILL);
  EXPECT_EQ(proc->term_signal(), SIGKILL);
  EXPECT_FALSE(proc->running());
  proc->Signal(SIGKILL);  // a no-op once reaped

  auto term = StartShell("echo up; exec sleep 60");
  ASSERT_NE(term, nullptr);
  ASSERT_TRUE(term->WaitForLine("up", kTimeout).ok());
  term->Signal(SIGTERM);
  EXPECT_EQ(*term->Wait(kTimeout), 128 + SIGTERM);
  EXPECT_EQ(term->term_signal(), SIGTERM);

  // The same code from an exit of its own is no signal.
  auto exited = StartShell("exit 137");
  ASSERT_NE(exited, nullptr);
  EXPECT_EQ(*exited->Wait(kTimeout), 137);
  EXPECT_EQ(exited->term_signal(), 0);
}

TEST(SubprocessTest, WaitTimesOut) {
  auto proc = StartShell("exec sleep 60");
  ASSERT_NE(proc, nullptr);
  absl::StatusOr<int> code = proc->Wait(absl::Milliseconds(50));
  EXPECT_EQ(code.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(proc->running());
  // The destructor kills and reaps it.
}

TEST(SubprocessTest, MissingExecutableIsAnError) {
  Subprocess::Options options;
  options.argv = {"/nonexistent/asyncps-no-such-program"};
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(options);
  ASSERT_FALSE(proc.ok());
  EXPECT_THAT(proc.status().message(), HasSubstr("asyncps-no-such-program"));

  options.argv = {"asyncps-no-such-program-in-path"};
  EXPECT_EQ(Subprocess::Start(options).status().code(), absl::StatusCode::kNotFound);

  options.argv = {"/etc/hostname"};  // exists, not executable
  EXPECT_FALSE(Subprocess::Start(options).ok());

  options.argv = {};
  EXPECT_EQ(Subprocess::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, ExecFailureAfterForkIsAnError) {
  // Executable but not a valid binary or script: execve fails with ENOEXEC in the child and the
  // error pipe carries that back to Start.
  testutil::TestDir temp("subprocess_test");
  std::string path = temp.path() + "/not_a_binary_XXXXXX";
  const int fd = mkstemp(path.data());
  ASSERT_GE(fd, 0);
  const char garbage[] = "\x7f" "ELF garbage";
  ASSERT_EQ(write(fd, garbage, sizeof(garbage)), static_cast<ssize_t>(sizeof(garbage)));
  close(fd);
  ASSERT_EQ(chmod(path.c_str(), 0700), 0);
  Subprocess::Options options;
  options.argv = {path};
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(options);
  ASSERT_FALSE(proc.ok());
  EXPECT_THAT(proc.status().message(), HasSubstr("cannot execute"));
}

TEST(SubprocessTest, FindsProgramOnPath) {
  Subprocess::Options options;
  options.argv = {"sh", "-c", "echo found"};
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(std::move(options));
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_TRUE((*proc)->WaitForLine("found", kTimeout).ok());
}

TEST(SubprocessTest, EnvIsPassed) {
  ASSERT_EQ(setenv("ASYNCPS_SUBPROCESS_TEST_INHERITED", "from parent", 1), 0);
  ASSERT_EQ(setenv("ASYNCPS_SUBPROCESS_TEST_OVERRIDDEN", "old", 1), 0);
  auto proc = StartShell(
      "echo \"a=$ASYNCPS_SUBPROCESS_TEST_ADDED\"; echo \"b=$ASYNCPS_SUBPROCESS_TEST_INHERITED\"; "
      "echo \"c=$ASYNCPS_SUBPROCESS_TEST_OVERRIDDEN\"",
      {{"ASYNCPS_SUBPROCESS_TEST_ADDED", "hello world"}, {"ASYNCPS_SUBPROCESS_TEST_OVERRIDDEN", "new"}});
  unsetenv("ASYNCPS_SUBPROCESS_TEST_INHERITED");
  unsetenv("ASYNCPS_SUBPROCESS_TEST_OVERRIDDEN");
  ASSERT_NE(proc, nullptr);
  ASSERT_EQ(*proc->Wait(kTimeout), 0);
  EXPECT_EQ(*proc->WaitForLine("a=", kTimeout), "a=hello world");
  EXPECT_EQ(*proc->WaitForLine("b=", kTimeout), "b=from parent");
  EXPECT_EQ(*proc->WaitForLine("c=", kTimeout), "c=new");
}

TEST(SubprocessTest, WaitForLineOnExitedProcessIsFailedPrecondition) {
  auto proc = StartShell("echo one; echo two; exit 7");
  ASSERT_NE(proc, nullptr);
  absl::StatusOr<std::string> line = proc->WaitForLine("never printed", kTimeout);
  EXPECT_EQ(line.status().code(), absl::StatusCode::kFailedPrecondition) << line.status();
  // Output printed before the exit is all there.
  EXPECT_EQ(proc->output(), "one\ntwo");
  EXPECT_EQ(*proc->Wait(kTimeout), 7);
}

TEST(SubprocessTest, WaitForLineTimesOut) {
  auto proc = StartShell("echo something; exec sleep 60");
  ASSERT_NE(proc, nullptr);
  absl::StatusOr<std::string> line = proc->WaitForLine("never printed", absl::Milliseconds(100));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kDeadlineExceeded) << line.status();
}

TEST(SubprocessTest, MergesStderrAndCallsOnLine) {
  Mutex mu;
  std::vector<std::string> seen;
  Subprocess::Options options;
  options.argv = {"/bin/sh", "-c", "echo out; echo err >&2; printf 'no newline'"};
  options.on_line = [&](const std::string& line) {
    MutexLock lock(&mu);
    seen.push_back(line);
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(std::move(options));
  ASSERT_TRUE(proc.ok()) << proc.status();
  // The unterminated last line is delivered once the process has exited.
  ASSERT_TRUE((*proc)->WaitForLine("no newline", kTimeout).ok());
  EXPECT_EQ((*proc)->output(), "out\nerr\nno newline");
  proc->reset();  // joins the reader: no more callbacks after this
  MutexLock lock(&mu);
  EXPECT_THAT(seen, ElementsAre("out", "err", "no newline"));
}

TEST(SubprocessTest, KeepLinesOff) {
  Subprocess::Options options;
  options.argv = {"/bin/sh", "-c", "echo x"};
  options.keep_lines = false;
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(std::move(options));
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_EQ(*(*proc)->Wait(kTimeout), 0);
  EXPECT_EQ((*proc)->output(), "");
  EXPECT_EQ((*proc)->WaitForLine("x", kTimeout).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SubprocessTest, StdinIsEmpty) {
  // `cat` would block forever on an inherited terminal or pipe.
  auto proc = StartShell("cat; echo done");
  ASSERT_NE(proc, nullptr);
  EXPECT_TRUE(proc->WaitForLine("done", kTimeout).ok());
  EXPECT_EQ(*proc->Wait(kTimeout), 0);
}

TEST(SubprocessTest, ParentFdsDoNotLeak) {
  // An fd opened without O_CLOEXEC (as other threads or libraries may do) must not reach the
  // child. `[` is a shell builtin, so the check looks at the shell's own fd table.
  const int opened = open("/dev/null", O_RDONLY);
  ASSERT_GE(opened, 0);
  constexpr int kLeaky = 57;
  ASSERT_EQ(dup2(opened, kLeaky), kLeaky);  // dup2 clears close-on-exec
  close(opened);
  auto proc = StartShell(
      "if [ -e /proc/self/fd/57 ]; then echo fd57 leaked; else echo fd57 closed; fi; "
      "if [ -e /proc/self/fd/2 ]; then echo fd2 open; fi");
  close(kLeaky);
  ASSERT_NE(proc, nullptr);
  ASSERT_EQ(*proc->Wait(kTimeout), 0);
  EXPECT_EQ(*proc->WaitForLine("fd57", kTimeout), "fd57 closed");
  EXPECT_TRUE(proc->WaitForLine("fd2 open", kTimeout).ok());
}

TEST(SubprocessTest, ExitIsSeenEvenWhenAGrandchildHoldsTheOutput) {
  // The background sleep inherits the pipe, so EOF does not come when the shell exits.
  auto proc = StartShell("sleep 60 & echo \"bg=$!\"; exit 5");
  ASSERT_NE(proc, nullptr);
  absl::StatusOr<std::string> bg = proc->WaitForLine("bg=", kTimeout);
  ASSERT_TRUE(bg.ok()) << bg.status();
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(bg->substr(3), &grandchild)) << *bg;
  EXPECT_EQ(*proc->Wait(kTimeout), 5);
  EXPECT_EQ(proc->WaitForLine("never", kTimeout).status().code(), absl::StatusCode::kFailedPrecondition);
  proc.reset();  // must not hang on the open pipe
  kill(grandchild, SIGKILL);  // the test started it; end it by pid
}

TEST(PickUnusedPortTest, ReturnsBindablePort) {
  absl::StatusOr<int> port = PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GE(*port, 1);
  EXPECT_LE(*port, 65535);

  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(*port));
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  close(fd);
}

TEST(PickUnusedPortsTest, ReturnsDistinctPorts) {
  absl::StatusOr<std::vector<int>> ports = PickUnusedPorts(64);
  ASSERT_TRUE(ports.ok()) << ports.status();
  ASSERT_EQ(ports->size(), 64u);
  std::set<int> distinct(ports->begin(), ports->end());
  EXPECT_EQ(distinct.size(), 64u);
  for (int port : *ports) {
    EXPECT_GE(port, 1);
    EXPECT_LE(port, 65535);
  }
}

}  // namespace
}  // namespace asyncps
