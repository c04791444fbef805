#ifndef ASYNCPS_CORE_SUBPROCESS_H_
#define ASYNCPS_CORE_SUBPROCESS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync.h"
#include "absl/time/time.h"

namespace asyncps {

// A child process started with fork/exec whose stdout and stderr are read line by line on a
// background thread. Used by the local launcher and by integration tests; ends only the
// process it started, by pid.
//
// Thread-safety: all methods may be called from any thread.
class Subprocess {
 public:
  struct Options {
    std::vector<std::string> argv;                // argv[0] is the program path
    std::map<std::string, std::string> env;       // added to (overriding) the parent's env
    // Called for every output line (stdout and stderr merged), without the newline, on the
    // reader thread. May be empty.
    std::function<void(const std::string& line)> on_line;
    bool keep_lines = true;                       // keep lines for WaitForLine / output()
  };

  // Starts the process. Errors: the executable is missing or fork/pipe failed.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(Options options);

  // Kills the process with SIGKILL (if still running) and reaps it.
  ~Subprocess();

  pid_t pid() const { return pid_; }

  // Blocks until a line containing `needle` has been printed (returns that line), the process
  // exits (FailedPrecondition) or `timeout` passes (DeadlineExceeded).
  absl::StatusOr<std::string> WaitForLine(const std::string& needle, absl::Duration timeout);

  // Sends `signal` (e.g. SIGKILL, SIGTERM) to the process; no-op once it has been reaped.
  void Signal(int signal);

  // Waits for exit up to `timeout`; returns the exit code (128+signal when killed by a
  // signal) or DeadlineExceeded. On return every line the process printed before it exited is
  // in output() and has been passed to on_line.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  // True until the process has exited and been reaped.
  bool running();

  // The signal that ended the process (SIGKILL, SIGSEGV, ...); 0 while it runs, when it
  // exited by itself (an exit(137) is not a SIGKILL), or when its status was lost.
  int term_signal();

  // Everything printed so far (when keep_lines), newline-joined.
  std::string output();

 private:
  Subprocess() = default;
  // Reader thread body: splits `out_fd_` into lines and reaps the child when `pid_fd_` says it
  // exited; returns at EOF after exit, or when woken through `wake_fd_` by the destructor.
  void ReadLoop();
  // Appends complete lines to lines_ and hands them to on_line (outside mu_).
  void EmitLines(std::vector<std::string> lines);
  // Reaps the child if it has exited, without blocking.
  void TryReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordExitLocked(int wait_status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  pid_t pid_ = -1;
  int out_fd_ = -1;   // read end of the child's merged stdout+stderr (non-blocking)
  int pid_fd_ = -1;   // pidfd of the child, -1 when the kernel has none
  int wake_fd_[2] = {-1, -1};  // pipe the destructor writes to so the reader stops
  Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool eof_ ABSL_GUARDED_BY(mu_) = false;
  // The child exited and everything it wrote before exiting has been read; a grandchild may
  // still hold the pipe open, so this can be true long before eof_.
  bool exited_and_drained_ ABSL_GUARDED_BY(mu_) = false;
  bool reaped_ ABSL_GUARDED_BY(mu_) = false;
  int exit_code_ ABSL_GUARDED_BY(mu_) = -1;
  int term_signal_ ABSL_GUARDED_BY(mu_) = 0;
  Options options_;
  std::thread reader_;
};

// Returns a TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
absl::StatusOr<int> PickUnusedPort();

// Returns `count` distinct such ports. Calling PickUnusedPort `count` times is not enough: the
// kernel may hand a just-released port out again, and two tasks of one cluster would be given
// the same address. Unavailable when distinct ports cannot be found.
absl::StatusOr<std::vector<int>> PickUnusedPorts(int count);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_SUBPROCESS_H_
