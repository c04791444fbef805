#include "bench/socket_bytes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps::bench {
namespace {

// A loopback TCP connection made with plain sockets: client and accepted server end.
struct Connection {
  int listener = -1, client = -1, server = -1;
  ~Connection() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  }
};

TEST(SocketBytesTest, LoopbackBytesAreCountedForThisProcess) {
  Connection c;
  c.listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(c.listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(c.listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(c.listener, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(c.listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  c.client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c.client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  c.server = accept(c.listener, nullptr, nullptr);
  ASSERT_GE(c.server, 0);

  auto table = ReadTcpBytes();
  ASSERT_TRUE(table.ok()) << table.status();
  auto before = SocketBytesOf(getpid(), *table);
  ASSERT_TRUE(before.ok()) << before.status();

  constexpr size_t kBytes = 100000;
  const std::string payload(kBytes, 'x');
  size_t sent = 0;
  std::vector<char> in(kBytes);
  size_t received = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (received < kBytes && std::chrono::steady_clock::now() < give_up) {
    if (sent < kBytes) {
      const ssize_t n = send(c.client, payload.data() + sent, kBytes - sent, MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    const ssize_t n = recv(c.server, in.data(), kBytes - received, MSG_DONTWAIT);
    if (n > 0) received += static_cast<size_t>(n);
  }
  ASSERT_EQ(received, kBytes);
  // Sent bytes count once acknowledged, which the kernel does on its own time: wait for it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int64_t moved = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    table = ReadTcpBytes();
    ASSERT_TRUE(table.ok()) << table.status();
    auto after = SocketBytesOf(getpid(), *table);
    ASSERT_TRUE(after.ok()) << after.status();
    moved = SocketBytesMoved(*before, *after);
    if (moved >= static_cast<int64_t>(2 * kBytes)) break;
  }
  // Both ends are this process's: sent (acknowledged) by one, received by the other.
  EXPECT_EQ(moved, static_cast<int64_t>(2 * kBytes));
}

TEST(SocketBytesTest, NewSocketsCountFromZeroAndClosedOnesAreDropped) {
  const std::map<uint64_t, int64_t> before = {{1, 100}, {2, 50}};
  const std::map<uint64_t, int64_t> after = {{1, 130}, {3, 7}};
  EXPECT_EQ(SocketBytesMoved(before, after), 30 + 7);
}

TEST(SocketBytesTest, AProcessThatIsGoneIsNotFound) {
  EXPECT_EQ(SocketBytesOf(1 << 30, {}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace asyncps::bench
