#ifndef ASYNCPS_NET_EVENT_LOOP_H_
#define ASYNCPS_NET_EVENT_LOOP_H_

#include <functional>
#include <memory>
#include <thread>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace asyncps::net {

// One I/O thread running an Asio io_context. Every socket, timer and piece of connection
// state of the servers and clients built on it is touched only from this thread, so they
// need no locks. Created in main and passed by reference (no hidden global loop). An
// exception escaping a handler is logged and the loop keeps running.
//
// Thread-safe: Post may be called from any thread. The destructor stops the loop and joins
// its thread; servers and clients using it must be destroyed first.
class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs `fn` on the loop thread.
  void Post(std::function<void()> fn);

  // True when called from the loop thread.
  bool InLoopThread() const;

  boost::asio::io_context& context() { return *context_; }

 private:
  void Run();

  std::unique_ptr<boost::asio::io_context> context_;
  struct WorkGuard;
  std::unique_ptr<WorkGuard> guard_;
  std::thread thread_;
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_EVENT_LOOP_H_
