#include "net/event_loop.h"

#include <spdlog/spdlog.h>

#include <kj/exception.h>

#include <exception>

#include "net/asio.h"

namespace asyncps::net {

struct EventLoop::WorkGuard {
  asio::executor_work_guard<asio::io_context::executor_type> guard;
};

EventLoop::EventLoop()
    : context_(std::make_unique<asio::io_context>(1)),
      guard_(new WorkGuard{asio::make_work_guard(*context_)}) {
  // spdlog builds its registry (a function-local static inside libspdlog) on first use. Build
  // it here, before this loop's thread exists, so threads that log first never race on it.
  spdlog::default_logger_raw();
  thread_ = std::thread([this] { Run(); });
}

void EventLoop::Run() {
  // Nothing may end the I/O thread: every decoder and handler has its own error boundary,
  // and this is the last one. After a handler threw, run() can simply be called again.
  for (;;) {
    try {
      context_->run();
      return;  // stopped
    } catch (const kj::Exception& e) {
      spdlog::error("I/O loop: uncaught Cap'n Proto exception (handler dropped): {}",
                    e.getDescription().cStr());
    } catch (const std::exception& e) {
      spdlog::error("I/O loop: uncaught exception (handler dropped): {}", e.what());
    } catch (...) {
      spdlog::error("I/O loop: uncaught exception of unknown type (handler dropped)");
    }
  }
}

EventLoop::~EventLoop() {
  guard_.reset();
  context_->stop();
  thread_.join();
}

void EventLoop::Post(std::function<void()> fn) { asio::post(*context_, std::move(fn)); }

bool EventLoop::InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }

}  // namespace asyncps::net
