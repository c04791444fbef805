#ifndef ASYNCPS_METRICS_HTTP_SERVER_H_
#define ASYNCPS_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace asyncps::metrics {

// What a page handler answers.
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// A small HTTP/1.1 server for /metrics and a few pages (Boost.Beast over Asio, kept out of this
// header). It answers GET on exact paths, one request per connection (Connection: close):
// 404 for an unknown path, 405 for another method on a known one, 431 for a request head over
// max_request_bytes, 413 for a body over it.
//
// Everything runs on one thread of its own with its own io_context. metrics/ sits below net/
// in the module order, so it cannot use the process's net::EventLoop; and a scrape must not
// wait behind RPC work on that loop either. Connections are asynchronous, so an idle or slow
// one holds no thread: it costs one of max_connections slots, for at most request_timeout to
// deliver its request, again to take its answer, and again to close after it. When every
// slot is taken, a new connection evicts the oldest one not being answered (waiting for its
// request, or for its peer to close after the answer), so idle connections cannot keep a
// scrape out; only when every slot is busy answering does the next connection wait (in the
// listen backlog) until one finishes.
//
// Thread-safe. Handlers run on the server's thread, one at a time.
class HttpServer {
 public:
  struct Options {
    int max_connections = 16;
    absl::Duration request_timeout = absl::Milliseconds(500);
    size_t max_request_bytes = 16 << 10;
  };
  using Handler = std::function<HttpResponse()>;

  // Listens on `address` (an IPv4 or IPv6 literal; "0.0.0.0" or "::" for every interface) and
  // `port` (0 picks a free one) and starts the server's thread.
  // Errors: InvalidArgument for an address that is not an IP literal or a bad option;
  // Unavailable when the address cannot be bound (in use, not this host's).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address, int port,
                                                           const Options& options);

  // Closes the listener and every connection, and joins the server's thread: when it returns
  // no handler is running or will run again.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET `path` (exact, without the query string) with `handler` from now on, replacing
  // an earlier handler for the same path (a request already in it finishes with the old one).
  // A handler must not block for long: it holds up every other connection. An exception out
  // of it becomes a 500 answer.
  void AddHandler(const std::string& path, Handler handler);

  // The port and address actually bound (the address as given, e.g. "0.0.0.0"; the port
  // chosen when 0 was asked for).
  int port() const;
  const std::string& bound_address() const;

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace asyncps::metrics

#endif  // ASYNCPS_METRICS_HTTP_SERVER_H_
