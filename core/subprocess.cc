#include "core/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "core/sync.h"

extern char** environ;

namespace asyncps {
namespace {

constexpr size_t kReadChunk = 64 << 10;

std::string ErrnoText(int err) { return std::strerror(err); }

void CloseFd(int* fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Finds the file execve will run. Checked in the parent so a typo in the program name is a
// clear error from Start rather than a child that exits with 127.
absl::StatusOr<std::string> ResolveExecutable(const std::string& name, const std::string& path_env) {
  if (name.empty()) return absl::InvalidArgumentError("argv[0] is empty");
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), F_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("executable '", name, "' does not exist"));
    }
    if (!IsExecutableFile(name)) {
      return absl::PermissionDeniedError(absl::StrCat("'", name, "' is not an executable file"));
    }
    return name;
  }
  for (absl::string_view dir : absl::StrSplit(path_env, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("executable '", name, "' not found in PATH"));
}

// Everything below runs in the forked child of a possibly multi-threaded parent, so it may only
// call async-signal-safe functions: no allocation, no locks, no logging.
void MoveFdInChild(int from, int to) {
  if (from == to) {
    fcntl(to, F_SETFD, 0);  // dup2 would not clear close-on-exec in this case
  } else {
    dup2(from, to);
  }
}

void CloseFromInChild(unsigned first, unsigned last, int fallback_limit) {
  if (first > last) return;
  if (close_range(first, last, 0) == 0) return;
  // Kernels before 5.9 have no close_range.
  const unsigned limit = std::min(last, static_cast<unsigned>(fallback_limit));
  for (unsigned fd = first; fd <= limit; ++fd) close(static_cast<int>(fd));
}

[[noreturn]] void RunChild(const char* path, char* const* argv, char* const* envp, int devnull,
                           int out_write, int err_write, pid_t parent, int fd_limit) {
  // The parent may block signals (the launcher blocks SIGINT/SIGTERM for sigwait) or ignore
  // them (SIGPIPE); masks and ignored dispositions survive execve, so reset both.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);

  // Die with the parent so a crashed launcher or test leaves no orphans. The signal fires
  // when the forking *thread* exits, and the check after it closes the race with a parent
  // that died before prctl ran.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);

  MoveFdInChild(devnull, STDIN_FILENO);
  MoveFdInChild(out_write, STDOUT_FILENO);
  MoveFdInChild(out_write, STDERR_FILENO);
  // Leave only stdio and the close-on-exec error pipe: fds another thread opened without
  // O_CLOEXEC must not leak into the child (a leaked pipe end would keep EOF from arriving).
  CloseFromInChild(3, static_cast<unsigned>(err_write) - 1, fd_limit);
  CloseFromInChild(static_cast<unsigned>(err_write) + 1, ~0U, fd_limit);

  execve(path, argv, envp);
  const int err = errno;
  ssize_t ignored = write(err_write, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

// Splits `chunk` into complete lines, keeping an unterminated tail in `partial`.
void SplitLines(absl::string_view chunk, std::string* partial, std::vector<std::string>* lines) {
  while (!chunk.empty()) {
    const size_t nl = chunk.find('\n');
    if (nl == absl::string_view::npos) {
      partial->append(chunk.data(), chunk.size());
      return;
    }
    partial->append(chunk.data(), nl);
    lines->push_back(std::move(*partial));
    partial->clear();
    chunk.remove_prefix(nl + 1);
  }
}

// Reads everything currently available from the non-blocking `fd`. Returns true at EOF.
bool DrainFd(int fd, std::string* partial, std::vector<std::string>* lines) {
  char buf[kReadChunk];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      SplitLines(absl::string_view(buf, static_cast<size_t>(n)), partial, lines);
      continue;
    }
    if (n == 0) return true;
    if (errno == EINTR) continue;
    // EAGAIN: nothing more for now. Any other error ends the stream like EOF would.
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

void FlushPartial(std::string* partial, std::vector<std::string>* lines) {
  if (!partial->empty()) {
    lines->push_back(std::move(*partial));
    partial->clear();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(Options options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("Subprocess argv is empty");

  // The child's environment: ours, overridden by options.env.
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos) continue;
    env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  for (const auto& [key, value] : options.env) env[key] = value;
  const auto path_it = env.find("PATH");
  absl::StatusOr<std::string> path =
      ResolveExecutable(options.argv[0], path_it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : path_it->second);
  if (!path.ok()) return path.status();

  // Everything the child needs is built before fork: it must not allocate.
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (const auto& [key, value] : env) env_strings.push_back(absl::StrCat(key, "=", value));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  struct rlimit nofile;
  const int fd_limit = getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY
                           ? static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20))
                           : 65536;

  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(err)));
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid == 0) {
    RunChild(path->c_str(), argv.data(), envp.data(), devnull, out_pipe[1], err_pipe[1], parent, fd_limit);
  }
  const int fork_errno = errno;
  close(out_pipe[1]);
  close(err_pipe[1]);
  CloseFd(&devnull);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return absl::InternalError(absl::StrCat("fork: ", ErrnoText(fork_errno)));
  }

  // The error pipe closes on a successful execve; otherwise the child sends its errno.
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(err_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(out_pipe[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute '", *path, "': ", ErrnoText(exec_errno)));
  }

  auto proc = std::unique_ptr<Subprocess>(new Subprocess());
  proc->pid_ = pid;
  proc->out_fd_ = out_pipe[0];
  fcntl(proc->out_fd_, F_SETFL, fcntl(proc->out_fd_, F_GETFL) | O_NONBLOCK);
  // A pidfd tells the reader when the child exits even if a grandchild keeps the pipe open.
  // Without one (old kernels, strict seccomp) exit is noticed at EOF.
  proc->pid_fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pipe2(proc->wake_fd_, O_CLOEXEC) != 0) {
    // Unreachable in practice; the destructor kills and reaps the child.
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  proc->options_ = std::move(options);
  proc->reader_ = std::thread(&Subprocess::ReadLoop, proc.get());
  return proc;
}

Subprocess::~Subprocess() {
  {
    MutexLock lock(&mu_);
    if (pid_ > 0) {
      TryReapLocked();
      if (!reaped_) {
        kill(pid_, SIGKILL);
        int status = 0;
        pid_t r;
        do {
          r = waitpid(pid_, &status, 0);
        } while (r < 0 && errno == EINTR);
        if (r == pid_) RecordExitLocked(status);
        reaped_ = true;
      }
    }
  }
  if (wake_fd_[1] >= 0) {
    const char byte = 0;
    ssize_t ignored = write(wake_fd_[1], &byte, 1);
    (void)ignored;
  }
  if (reader_.joinable()) reader_.join();
  CloseFd(&out_fd_);
  CloseFd(&pid_fd_);
  CloseFd(&wake_fd_[0]);
  CloseFd(&wake_fd_[1]);
}

void Subprocess::RecordExitLocked(int wait_status) {
  reaped_ = true;
  if (WIFEXITED(wait_status)) {
    exit_code_ = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    term_signal_ = WTERMSIG(wait_status);
    exit_code_ = 128 + term_signal_;
  }
}

void Subprocess::TryReapLocked() {
  if (reaped_ || pid_ <= 0) return;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    RecordExitLocked(status);
  } else if (r < 0 && errno == ECHILD) {
    // Someone else reaped it (e.g. a SIGCHLD handler set to SIG_IGN); the code is lost.
    reaped_ = true;
  }
}

void Subprocess::EmitLines(std::vector<std::string> lines) {
  if (lines.empty()) return;
  if (options_.on_line) {
    for (const std::string& line : lines) options_.on_line(line);
  }
  if (options_.keep_lines) {
    MutexLock lock(&mu_);
    for (std::string& line : lines) lines_.push_back(std::move(line));
  }
}

void Subprocess::ReadLoop() {
  std::string partial;
  bool eof = false;
  bool exited = false;
  pollfd fds[3] = {{out_fd_, POLLIN, 0}, {pid_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
  while (!(eof && exited)) {
    std::vector<std::string> lines;
    if (eof && pid_fd_ < 0) {
      // No pidfd: the pipe closed, so the child has exited or is about to; wait for it
      // without reaping (reaping stays under mu_, so pids cannot be recycled under us).
      siginfo_t info;
      while (waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
      }
      MutexLock lock(&mu_);
      TryReapLocked();
      exited_and_drained_ = true;
      exited = true;
      continue;
    }
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[2].revents != 0) {
      // The destructor has reaped the child: keep what it wrote, then stop.
      if (!eof) DrainFd(out_fd_, &partial, &lines);
      FlushPartial(&partial, &lines);
      EmitLines(std::move(lines));
      break;
    }
    if (fds[0].revents != 0) {
      if (DrainFd(out_fd_, &partial, &lines)) {
        eof = true;
        fds[0].fd = -1;
        FlushPartial(&partial, &lines);
      }
    }
    const bool just_exited = fds[1].revents != 0;
    if (just_exited) {
      // Everything the child wrote is already in the pipe; read it before saying it exited.
      fds[1].fd = -1;
      if (!eof && DrainFd(out_fd_, &partial, &lines)) {
        eof = true;
        fds[0].fd = -1;
      }
      FlushPartial(&partial, &lines);
      exited = true;
    }
    EmitLines(std::move(lines));
    if (eof || just_exited) {
      MutexLock lock(&mu_);
      eof_ = eof;
      if (just_exited) {
        TryReapLocked();
        exited_and_drained_ = true;
      }
    }
  }
  MutexLock lock(&mu_);
  eof_ = true;
  exited_and_drained_ = true;
}

absl::StatusOr<std::string> Subprocess::WaitForLine(const std::string& needle, absl::Duration timeout) {
  if (!options_.keep_lines) {
    return absl::FailedPreconditionError("WaitForLine needs Options::keep_lines");
  }
  MutexLock lock(&mu_);
  size_t scanned = 0;
  int found = -1;
  auto done = [&]() {
    mu_.AssertReaderHeld();
    for (; scanned < lines_.size(); ++scanned) {
      if (lines_[scanned].find(needle) != std::string::npos) {
        found = static_cast<int>(scanned);
        return true;
      }
    }
    return eof_ || exited_and_drained_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  if (found >= 0) return lines_[found];
  if (eof_ || exited_and_drained_) {
    TryReapLocked();
    return absl::FailedPreconditionError(absl::StrCat(
        "process ", pid_, reaped_ ? absl::StrCat(" exited with code ", exit_code_) : " closed its output",
        " before printing a line containing '", needle, "'"));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no line containing '", needle, "' from process ", pid_, " within ", absl::FormatDuration(timeout)));
}

void Subprocess::Signal(int signal) {
  MutexLock lock(&mu_);
  // Only signal an unreaped pid: once reaped the number may belong to someone else.
  TryReapLocked();
  if (!reaped_ && pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  MutexLock lock(&mu_);
  TryReapLocked();
  // Reaped is not enough: callers read output() next, so also wait until the reader has
  // taken in everything the child wrote before it exited (with a pidfd it always will).
  auto exited_and_read = [this]() {
    mu_.AssertReaderHeld();
    return reaped_ && (exited_and_drained_ || pid_fd_ < 0);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&exited_and_read), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("process ", pid_, " still running after ", absl::FormatDuration(timeout)));
  }
  return exit_code_;
}

bool Subprocess::running() {
  MutexLock lock(&mu_);
  TryReapLocked();
  return !reaped_;
}

int Subprocess::term_signal() {
  MutexLock lock(&mu_);
  TryReapLocked();
  return term_signal_;
}

std::string Subprocess::output() {
  MutexLock lock(&mu_);
  return absl::StrJoin(lines_, "\n");
}

absl::StatusOr<int> PickUnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", ErrnoText(errno)));
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("bind 127.0.0.1:0: ", ErrnoText(err)));
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("getsockname: ", ErrnoText(err)));
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

absl::StatusOr<std::vector<int>> PickUnusedPorts(int count) {
  absl::flat_hash_set<int> seen;
  std::vector<int> ports;
  for (int attempts = 0; static_cast<int>(ports.size()) < count; ++attempts) {
    if (attempts > count * 10 + 10) return absl::UnavailableError("could not find enough distinct free ports");
    ASSIGN_OR_RETURN(int port, PickUnusedPort());
    if (seen.insert(port).second) ports.push_back(port);
  }
  return ports;
}

}  // namespace asyncps
