#ifndef ASYNCPS_METRICS_HTTP_TEST_CLIENT_H_
#define ASYNCPS_METRICS_HTTP_TEST_CLIENT_H_

// Raw-socket HTTP for the metrics tests: any address (IPv4 or IPv6), any request bytes, and
// connections held open on purpose. Every read gives up after 10 s of silence, so a wedged
// server fails a check instead of hanging the test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace asyncps::metrics::test_client {

// A connected socket to address:port (an IPv4 or IPv6 literal), or -1.
inline int Connect(const std::string& address, int port) {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family = AF_INET;
  if (auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
      inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
             inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
    family = AF_INET6;
  } else {
    return -1;
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&storage), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Everything the server sends until it closes (or 10 s of silence, or an error).
inline std::string ReadToEnd(int fd) {
  std::string out;
  char buf[8192];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// True when the server has closed the connection: a read sees end of stream or a reset, not
// a timeout.
inline bool ClosedByServer(int fd) {
  char c;
  const ssize_t n = read(fd, &c, 1);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Sends `request` on a new connection and returns the whole answer ("" when none).
inline std::string Exchange(const std::string& address, int port, const std::string& request) {
  const int fd = Connect(address, port);
  if (fd < 0) return "";
  std::string out = SendAll(fd, request) ? ReadToEnd(fd) : "";
  close(fd);
  return out;
}

inline std::string Get(const std::string& address, int port, const std::string& path) {
  return Exchange(address, port, "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n");
}

}  // namespace asyncps::metrics::test_client

#endif  // ASYNCPS_METRICS_HTTP_TEST_CLIENT_H_
