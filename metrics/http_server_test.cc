#include "metrics/http_server.h"

#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/http_test_client.h"

namespace asyncps::metrics {
namespace {

using test_client::ClosedByServer;
using test_client::Connect;
using test_client::Exchange;
using test_client::Get;
using test_client::SendAll;

std::unique_ptr<HttpServer> StartOrDie(HttpServer::Options options = {},
                                       const std::string& address = "127.0.0.1") {
  auto server = HttpServer::Start(address, 0, options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  (*server)->AddHandler("/metrics", [] { return HttpResponse{200, "text/plain", "up 1\n"}; });
  return std::move(*server);
}

TEST(HttpServerTest, AnswersGetOnKnownPathsOnly) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(server->bound_address(), "127.0.0.1");
  const std::string ok = Get("127.0.0.1", port, "/metrics");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Type: text/plain\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("Connection: close\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\r\n\r\nup 1\n"), std::string::npos) << ok;
  // The query string is not part of the path.
  EXPECT_EQ(Get("127.0.0.1", port, "/metrics?x=1").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(Get("127.0.0.1", port, "/nothing").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Get("127.0.0.1", port, "/metrics/").rfind("HTTP/1.1 404", 0), 0u);
  // An HTTP/1.0 client is answered in HTTP/1.0.
  EXPECT_EQ(
      Exchange("127.0.0.1", port, "GET /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 200 OK", 0), 0u);
}

TEST(HttpServerTest, OtherMethodsAre405OnKnownPathsAnd404Elsewhere) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const std::string head = Exchange("127.0.0.1", port, "HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 405", 0), 0u) << head;
  EXPECT_NE(head.find("Allow: GET\r\n"), std::string::npos) << head;
  const std::string post = Exchange(
      "127.0.0.1", port, "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u) << post;
  EXPECT_EQ(Exchange("127.0.0.1", port, "POST /nothing HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                .rfind("HTTP/1.1 404", 0),
            0u);
}

TEST(HttpServerTest, OversizedRequestsAreRefusedAndTheServerGoesOn) {
  HttpServer::Options options;
  options.max_request_bytes = 4096;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const std::string big_head = Exchange(
      "127.0.0.1", port, "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_EQ(big_head.rfind("HTTP/1.1 431", 0), 0u) << big_head.substr(0, 200);
  const std::string big_body =
      Exchange("127.0.0.1", port, "GET /metrics HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
  EXPECT_EQ(big_body.rfind("HTTP/1.1 413", 0), 0u) << big_body;
  EXPECT_EQ(Exchange("127.0.0.1", port, "not http at all\r\n\r\n"), "");
  EXPECT_EQ(Get("127.0.0.1", port, "/metrics").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(HttpServerTest, HandlerErrorIs500AndALaterHandlerWins) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  server->AddHandler("/fails", []() -> HttpResponse { throw std::runtime_error("boom"); });
  const std::string failed = Get("127.0.0.1", server->port(), "/fails");
  EXPECT_EQ(failed.rfind("HTTP/1.1 500", 0), 0u) << failed;
  EXPECT_NE(failed.find("boom"), std::string::npos) << failed;
  server->AddHandler("/fails", [] { return HttpResponse{200, "text/plain", "fixed"}; });
  EXPECT_NE(Get("127.0.0.1", server->port(), "/fails").find("\r\n\r\nfixed"), std::string::npos);
}

TEST(HttpServerTest, HandlerStatusThatCannotCarryABodyIs500) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  for (int status : {0, 101, 204, 304, 600, 1000, -1}) {
    server->AddHandler("/odd", [status] { return HttpResponse{status, "text/plain", "body"}; });
    const std::string answer = Get("127.0.0.1", server->port(), "/odd");
    EXPECT_EQ(answer.rfind("HTTP/1.1 500", 0), 0u) << status << ": " << answer;
  }
  EXPECT_EQ(Get("127.0.0.1", server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(HttpServerTest, IdleConnectionIsClosedAfterTheRequestTimeout) {
  HttpServer::Options options;
  options.request_timeout = absl::Milliseconds(100);
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  const int fd = Connect("127.0.0.1", server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "GET /metrics HTTP/1.1\r\n"));  // and never the rest
  EXPECT_TRUE(ClosedByServer(fd));                        // within the client's 10 s read deadline
  close(fd);
}

// With every slot held by a connection that never sends its request (and a timeout far beyond
// the test's), a scrape still gets in: each new connection evicts the oldest idle one.
TEST(HttpServerTest, IdleConnectionsAreEvictedOldestFirstWhenSlotsRunOut) {
  HttpServer::Options options;
  options.max_connections = 4;
  options.request_timeout = absl::Hours(1);
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 10; ++i) {
    idle.push_back(Connect("127.0.0.1", server->port()));
    ASSERT_GE(idle.back(), 0);
  }
  const std::string scrape = Get("127.0.0.1", server->port(), "/metrics");
  EXPECT_EQ(scrape.rfind("HTTP/1.1 200", 0), 0u) << scrape;
  // 4 slots: connections 5..10 and the scrape each evicted the oldest idle one, so the first
  // six at least were closed by the server long before their timeout.
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(ClosedByServer(idle[static_cast<size_t>(i)])) << "connection " << i;
  for (int fd : idle) close(fd);
}

// A client that asks for a large page and does not read it keeps its slot (it is being
// answered) but not the server: other requests are answered meanwhile.
TEST(HttpServerTest, SlowReaderDoesNotHoldUpOtherRequests) {
  HttpServer::Options options;
  options.max_connections = 2;
  options.request_timeout = absl::Hours(1);
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  server->AddHandler("/big", [] {
    return HttpResponse{200, "text/plain", std::string(64 << 20, 'x')};
  });
  const int slow = Connect("127.0.0.1", server->port());
  ASSERT_GE(slow, 0);
  ASSERT_TRUE(SendAll(slow, "GET /big HTTP/1.1\r\n\r\n"));
  char first;
  ASSERT_EQ(read(slow, &first, 1), 1);  // its answer has started: the server is writing it
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Get("127.0.0.1", server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u) << i;
  }
  close(slow);
}

// With the only slot busy answering a client that does not read, the next connection waits
// in the listen backlog until the answer's write times out and frees the slot.
TEST(HttpServerTest, SlowReaderIsCutOffAfterTheTimeout) {
  HttpServer::Options options;
  options.max_connections = 1;
  options.request_timeout = absl::Milliseconds(200);
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  constexpr size_t kBig = 64 << 20;
  server->AddHandler("/big", [] { return HttpResponse{200, "text/plain", std::string(kBig, 'x')}; });
  const int slow = Connect("127.0.0.1", server->port());
  ASSERT_GE(slow, 0);
  ASSERT_TRUE(SendAll(slow, "GET /big HTTP/1.1\r\n\r\n"));
  char first;
  ASSERT_EQ(read(slow, &first, 1), 1);  // the answer has started and holds the one slot
  EXPECT_EQ(Get("127.0.0.1", server->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
  // The slot was freed by closing the slow connection part way through its answer.
  EXPECT_LT(test_client::ReadToEnd(slow).size(), kBig);
  close(slow);
}

TEST(HttpServerTest, DestructorWaitsForARunningHandlerAndClosesConnections) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  Notification started;
  Notification release;
  std::atomic<bool> handler_done{false};
  server->AddHandler("/slow", [&] {
    started.Notify();
    release.WaitForNotification();
    handler_done.store(true);
    return HttpResponse{200, "text/plain", "late"};
  });
  const int idle = Connect("127.0.0.1", server->port());
  ASSERT_GE(idle, 0);
  const int port = server->port();
  std::thread client([port] { Get("127.0.0.1", port, "/slow"); });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(30)));
  bool done_when_destroyed = false;
  std::thread destroyer([&] {
    server.reset();
    done_when_destroyed = handler_done.load();
  });
  release.Notify();
  destroyer.join();
  client.join();
  EXPECT_TRUE(done_when_destroyed);
  EXPECT_TRUE(ClosedByServer(idle));
  close(idle);
  // Nothing listens any more.
  EXPECT_LT(Connect("127.0.0.1", port), 0);
}

TEST(HttpServerTest, BadOrForeignAddressesAreErrors) {
  EXPECT_EQ(HttpServer::Start("localhost", 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start("127.0.0.1", 70000, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // TEST-NET-1 (RFC 5737): no interface of this host has it.
  auto foreign = HttpServer::Start("192.0.2.1", 0, {});
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kUnavailable) << foreign.status();
  auto first = StartOrDie();
  ASSERT_NE(first, nullptr);
  auto taken = HttpServer::Start("127.0.0.1", first->port(), {});
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable) << taken.status();
  EXPECT_NE(taken.status().message().find(std::to_string(first->port())), std::string::npos)
      << taken.status();
}

TEST(HttpServerTest, ServesOnIpv6Loopback) {
  auto server = HttpServer::Start("::1", 0, {});
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  (*server)->AddHandler("/metrics", [] { return HttpResponse{200, "text/plain", "up 1\n"}; });
  EXPECT_EQ((*server)->bound_address(), "::1");
  EXPECT_EQ(Get("::1", (*server)->port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
}

}  // namespace
}  // namespace asyncps::metrics
