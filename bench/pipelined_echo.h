#ifndef ASYNCPS_BENCH_PIPELINED_ECHO_H_
#define ASYNCPS_BENCH_PIPELINED_ECHO_H_

// The raw reference for "N small requests in flight from one thread": a plain TCP echo over
// one loopback connection that pays one system call per message on each side, and helpers to
// pin threads and processes to CPUs so that the reference and the measured system run with
// the same layout.

#include <pthread.h>
#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "net/asio.h"

namespace asyncps::bench {

// Pins thread `tid` (a Linux task id; 0 = the calling thread) to `cpu`. False when refused.
inline bool PinTask(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(tid, sizeof(set), &set) == 0;
}

// Pins every thread process `pid` has now (threads it starts later inherit the creating
// thread's CPU) to `cpu`. False when any was refused.
inline bool PinProcess(pid_t pid, int cpu) {
  bool ok = true;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    ok = PinTask(static_cast<pid_t>(std::stol(task.path().filename().string())), cpu) && ok;
  }
  return ok && !ec;
}

// The 1-, 5- and 15-minute load averages ("?" when unreadable): small-message latencies on a
// shared machine depend on what else runs, so each run says how busy the machine was.
inline std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "?";
  return one + " " + five + " " + fifteen;
}

// Undoes pinning: every thread of `pid` may run on any CPU of the machine.
inline void UnpinProcess(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned c = 0; c < n; ++c) CPU_SET(c, &set);
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    sched_setaffinity(static_cast<pid_t>(std::stol(task.path().filename().string())), sizeof(set), &set);
  }
}

// A blocking echo of fixed-size messages on one connection: the server thread reads one
// message (one recv) and writes it back (one send); the client keeps `window` messages in
// flight from the calling thread, sending the next as each echo arrives. No coalescing
// anywhere: one system call per message per side, the cost the issue compares against.
class PipelinedEcho {
 public:
  // `server_cpu` >= 0 pins the server thread there.
  PipelinedEcho(size_t message_bytes, int server_cpu)
      : acceptor_(server_context_, net::tcp::endpoint(net::asio::ip::make_address("127.0.0.1"), 0)),
        socket_(client_context_),
        out_(message_bytes, 0x5a),
        in_(message_bytes) {
    const uint16_t port = acceptor_.local_endpoint().port();
    server_ = std::thread([this, message_bytes, server_cpu] {
      if (server_cpu >= 0) PinTask(0, server_cpu);
      Serve(message_bytes);
    });
    socket_.connect(net::tcp::endpoint(net::asio::ip::make_address("127.0.0.1"), port));
    socket_.set_option(net::tcp::no_delay(true));
  }

  ~PipelinedEcho() {
    boost::system::error_code ignored;
    socket_.shutdown(net::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    server_.join();
  }

  // Completes `total` echoes with `window` in flight; the round-trip time of each (send to
  // echo, in microseconds) is appended to `micros` when given. Requests per second, or 0 on
  // a socket error.
  double Run(int total, int window, std::vector<double>* micros) {
    using Clock = std::chrono::steady_clock;
    boost::system::error_code ec;
    std::vector<Clock::time_point> sent(static_cast<size_t>(window));
    const Clock::time_point begin = Clock::now();
    int issued = 0;
    for (; issued < std::min(window, total); ++issued) {
      sent[static_cast<size_t>(issued % window)] = Clock::now();
      net::asio::write(socket_, net::asio::buffer(out_), ec);
      if (ec) return 0;
    }
    for (int done = 0; done < total; ++done) {
      net::asio::read(socket_, net::asio::buffer(in_), ec);
      if (ec) return 0;
      if (micros != nullptr) {
        micros->push_back(std::chrono::duration<double, std::micro>(
                              Clock::now() - sent[static_cast<size_t>(done % window)])
                              .count());
      }
      if (issued < total) {
        sent[static_cast<size_t>(issued % window)] = Clock::now();
        ++issued;
        net::asio::write(socket_, net::asio::buffer(out_), ec);
        if (ec) return 0;
      }
    }
    return total / std::chrono::duration<double>(Clock::now() - begin).count();
  }

 private:
  void Serve(size_t message_bytes) {
    boost::system::error_code ec;
    net::tcp::socket s(server_context_);
    acceptor_.accept(s, ec);
    if (ec) return;
    s.set_option(net::tcp::no_delay(true), ec);
    std::vector<uint8_t> buffer(message_bytes);
    for (;;) {
      net::asio::read(s, net::asio::buffer(buffer), ec);
      if (ec) return;  // the client closed: done
      net::asio::write(s, net::asio::buffer(buffer), ec);
      if (ec) return;
    }
  }

  net::asio::io_context server_context_;
  net::asio::io_context client_context_;
  net::tcp::acceptor acceptor_;
  net::tcp::socket socket_;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> in_;
  std::thread server_;
};

// Keeps `window` requests in flight from this thread until `total` have completed: a ring of
// slots, waiting for the oldest before issuing the next. `issue(slot)` sends one request into
// `slot`; `wait(slot)` blocks until that slot's request completed and returns its status.
// Appends each request's latency (issue to completion seen, µs) to `micros` when given; the
// first failure is printed after `what`. Requests per second, 0 on any failure.
template <typename Issue, typename Wait>
double PipelinedRequests(int total, int window, const char* what, Issue issue, Wait wait, std::vector<double>* micros) {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> sent(static_cast<size_t>(window));
  const Clock::time_point begin = Clock::now();
  bool ok = true;
  for (int i = 0; i < total + window; ++i) {
    const size_t slot = static_cast<size_t>(i % window);
    if (i >= window) {
      const auto status = wait(slot);
      if (micros != nullptr) {
        micros->push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent[slot]).count());
      }
      if (!status.ok()) {
        if (ok) std::fprintf(stderr, "%s failed: %s\n", what, status.ToString().c_str());
        ok = false;
      }
    }
    if (i < total) {
      sent[slot] = Clock::now();
      issue(slot);
    }
  }
  return ok ? total / std::chrono::duration<double>(Clock::now() - begin).count() : 0;
}

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_PIPELINED_ECHO_H_
