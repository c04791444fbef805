#include "metrics/http_server.h"

#include <pthread.h>

// Before Boost.Asio: Boost 1.74 with g++ 12 and C++20 needs std::exchange declared (TOOLCHAIN.md).
// clang-format off
#include <utility>
// clang-format on

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <exception>
#include <list>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/sync.h"

namespace asyncps::metrics {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

std::string HostPort(const std::string& address, int port) {
  return address.find(':') == std::string::npos ? absl::StrCat(address, ":", port)
                                                : absl::StrCat("[", address, "]:", port);
}

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(const Options& options) : options_(options), acceptor_(io_) {}

  ~Impl() {
    if (thread_.joinable()) {
      asio::post(io_, [this] { Shutdown(); });
      thread_.join();
    }
  }

  absl::Status Listen(const std::string& address, int port) {
    beast::error_code ec;
    const asio::ip::address ip = asio::ip::make_address(address, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not an IP address"));
    const tcp::endpoint endpoint(ip, static_cast<uint16_t>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", HostPort(address, port), ": ", ec.message()));
    const tcp::endpoint bound = acceptor_.local_endpoint(ec);
    if (ec)
      return absl::UnavailableError(absl::StrCat("cannot read the bound port: ", ec.message()));
    port_ = bound.port();
    bound_address_ = bound.address().to_string();
    return absl::OkStatus();
  }

  void Run() {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    pthread_setname_np(thread_.native_handle(), "metrics-http");
  }

  void AddHandler(const std::string& path, Handler handler) {
    auto h = std::make_shared<const Handler>(std::move(handler));
    MutexLock lock(&handlers_mu_);
    handlers_[path] = std::move(h);
  }

  int port() const { return port_; }
  const std::string& bound_address() const { return bound_address_; }

 private:
  class Session;

  // Everything below runs on the server's thread only.

  void Accept() {
    if (stopping_) return;
    if (sessions_.size() >= static_cast<size_t>(options_.max_connections) &&
        OldestWaiting() == nullptr) {
      accept_paused_ = true;  // every slot is answering; Leave resumes
      return;
    }
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (stopping_) return;  // accepted just before Shutdown closed the acceptor: dropped
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors, say: try again shortly instead of spinning.
        retry_.expires_after(std::chrono::milliseconds(100));
        retry_.async_wait([this](beast::error_code e) {
          if (!e) Accept();
        });
        return;
      }
      Admit(std::move(socket));
      if (!accept_paused_) Accept();
    });
  }

  void Admit(tcp::socket socket);

  Session* OldestWaiting();

  // A session has closed its connection and frees its slot.
  void Leave(std::list<Session*>::iterator it) {
    sessions_.erase(it);
    if (stopping_) return;
    if (waiting_socket_.has_value()) {
      tcp::socket next = std::move(*waiting_socket_);
      waiting_socket_.reset();
      Admit(std::move(next));
    }
    if (accept_paused_) {
      accept_paused_ = false;
      Accept();
    }
  }

  void Shutdown();

  HttpResponse Answer(const http::request<http::string_body>& request, bool* method_not_allowed) {
    const std::string_view target(request.target().data(), request.target().size());
    const std::string path(target.substr(0, target.find('?')));
    std::shared_ptr<const Handler> handler;
    {
      MutexLock lock(&handlers_mu_);
      auto it = handlers_.find(path);
      if (it != handlers_.end()) handler = it->second;
    }
    if (handler == nullptr) return {404, "text/plain; charset=utf-8", "not found\n"};
    if (request.method() != http::verb::get) {
      *method_not_allowed = true;
      return {405, "text/plain; charset=utf-8", "only GET\n"};
    }
    try {
      return (*handler)();
    } catch (const std::exception& e) {
      return {500, "text/plain; charset=utf-8", absl::StrCat("internal error: ", e.what(), "\n")};
    } catch (...) {
      return {500, "text/plain; charset=utf-8", "internal error\n"};
    }
  }

  const Options options_;
  int port_ = 0;
  std::string bound_address_;

  Mutex handlers_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Handler>> handlers_
      ABSL_GUARDED_BY(handlers_mu_);

  // Declared before what uses it: destroyed after the acceptor and every session.
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  tcp::acceptor acceptor_;
  asio::steady_timer retry_{io_};
  // Open connections, oldest first (owned by their pending operations).
  std::list<Session*> sessions_;
  // A connection accepted when every slot had just started answering; admitted first.
  std::optional<tcp::socket> waiting_socket_;
  bool accept_paused_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

// One connection: read one request (bounded in size and time), answer it, close.
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl* server, tcp::socket socket)
      : server_(server),
        stream_(std::move(socket)),
        buffer_(2 * server->options_.max_request_bytes + 1024) {}

  void Start(std::list<Session*>::iterator self) {
    self_ = self;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->options_.max_request_bytes));
    parser_->body_limit(server_->options_.max_request_bytes);
    stream_.expires_after(Timeout());
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  // Waiting for its request (or for the peer to close after the answer): it may be evicted.
  bool waiting() const { return waiting_; }

  void Close() {
    if (closed_) return;
    closed_ = true;
    stream_.close();  // cancels the pending operation and its timer
    server_->Leave(self_);
  }

 private:
  std::chrono::nanoseconds Timeout() const {
    return absl::ToChronoNanoseconds(server_->options_.request_timeout);
  }

  void OnRead(beast::error_code ec) {
    if (closed_) return;
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return Respond(11, {431, "text/plain; charset=utf-8", "request head too large\n"}, false);
    }
    if (ec == http::error::body_limit) {
      return Respond(11, {413, "text/plain; charset=utf-8", "request body too large\n"}, false);
    }
    if (ec) return Close();  // timed out, reset, or not HTTP
    const http::request<http::string_body>& request = parser_->get();
    bool method_not_allowed = false;
    HttpResponse answer = server_->Answer(request, &method_not_allowed);
    Respond(request.version(), std::move(answer), method_not_allowed);
  }

  void Respond(unsigned version, HttpResponse answer, bool method_not_allowed) {
    waiting_ = false;
    // Beast throws (on this thread, ending the process) for a status it cannot send with a
    // body: out of range, 1xx, 204 or 304. A handler's mistake is answered 500 instead.
    if (answer.status < 200 || answer.status > 599 || answer.status == 204 || answer.status == 304) {
      answer = {500, "text/plain; charset=utf-8",
                absl::StrCat("handler answered status ", answer.status, ", which cannot carry a body\n")};
    }
    response_.version(version == 10 ? 10 : 11);
    response_.result(static_cast<unsigned>(answer.status));
    response_.set(http::field::content_type, answer.content_type);
    response_.set(http::field::cache_control, "no-store");
    if (method_not_allowed) response_.set(http::field::allow, "GET");
    response_.keep_alive(false);
    response_.body() = std::move(answer.body);
    response_.prepare_payload();
    stream_.expires_after(Timeout());
    http::async_write(
        stream_, response_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    if (closed_) return;
    if (ec) return Close();
    // Half-close and read until the peer closes: closing with unread request bytes would
    // reset the connection and could destroy the answer before the client reads it.
    waiting_ = true;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(Timeout());
    Drain();
  }

  void Drain() {
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (self->closed_) return;
                              if (ec) return self->Close();
                              self->Drain();
                            });
  }

  Impl* const server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  char scratch_[512];
  std::list<Session*>::iterator self_;
  bool waiting_ = true;
  bool closed_ = false;
};

void HttpServer::Impl::Admit(tcp::socket socket) {
  if (sessions_.size() >= static_cast<size_t>(options_.max_connections)) {
    if (Session* oldest = OldestWaiting()) {
      oldest->Close();
    } else {
      // Every slot started answering since Accept looked: this one waits for the first to
      // finish (as the next ones wait in the listen backlog).
      waiting_socket_.emplace(std::move(socket));
      accept_paused_ = true;
      return;
    }
  }
  auto session = std::make_shared<Session>(this, std::move(socket));
  sessions_.push_back(session.get());
  session->Start(std::prev(sessions_.end()));
}

HttpServer::Impl::Session* HttpServer::Impl::OldestWaiting() {
  for (Session* s : sessions_) {
    if (s->waiting()) return s;
  }
  return nullptr;
}

void HttpServer::Impl::Shutdown() {
  stopping_ = true;
  beast::error_code ignored;
  acceptor_.close(ignored);
  retry_.cancel();
  waiting_socket_.reset();
  // Close removes the session from the list.
  while (!sessions_.empty()) sessions_.front()->Close();
  work_.reset();  // run() returns once the cancelled operations have completed
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address, int port,
                                                              const Options& options) {
  if (port < 0 || port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("port ", port, " is out of range"));
  if (options.max_connections < 1 || options.request_timeout <= absl::ZeroDuration() ||
      options.max_request_bytes < 256) {
    return absl::InvalidArgumentError(
        "HttpServer needs max_connections >= 1, a positive timeout and >= 256 request bytes");
  }
  auto impl = std::make_unique<Impl>(options);
  if (absl::Status s = impl->Listen(address, port); !s.ok()) return s;
  impl->Run();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

void HttpServer::AddHandler(const std::string& path, Handler handler) {
  impl_->AddHandler(path, std::move(handler));
}
int HttpServer::port() const { return impl_->port(); }
const std::string& HttpServer::bound_address() const { return impl_->bound_address(); }

}  // namespace asyncps::metrics
