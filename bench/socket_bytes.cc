#include "bench/socket_bytes.h"

#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace asyncps::bench {
namespace {

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Dumps every TCP socket of `family` with its tcp_info into `table`.
absl::Status Dump(int family, TcpBytes* table) {
  Fd fd(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd.get() < 0) return Errno("netlink socket");
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = static_cast<uint8_t>(family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0u;  // every state
  message.request.idiag_ext = 1 << (INET_DIAG_INFO - 1);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd.get(), &message, sizeof(message), 0, reinterpret_cast<sockaddr*>(&kernel),
             sizeof(kernel)) < 0) {
    return Errno("netlink sendto");
  }
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const ssize_t n = recv(fd.get(), buffer.data(), buffer.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("netlink recv");
    }
    // NLMSG_OK/NLMSG_NEXT by hand: the macros compare signed with unsigned (clang warns).
    const size_t received = static_cast<size_t>(n);
    for (size_t offset = 0; offset + sizeof(nlmsghdr) <= received;) {
      auto* h = reinterpret_cast<nlmsghdr*>(buffer.data() + offset);
      if (h->nlmsg_len < sizeof(nlmsghdr) || offset + h->nlmsg_len > received) break;
      offset += NLMSG_ALIGN(h->nlmsg_len);
      if (h->nlmsg_type == NLMSG_DONE) return absl::OkStatus();
      if (h->nlmsg_type == NLMSG_ERROR)
        return absl::InternalError("netlink: the kernel refused the socket dump");
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
      auto* diag = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      int attributes_length = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*diag)));
      for (auto* a = reinterpret_cast<rtattr*>(diag + 1); RTA_OK(a, attributes_length);
           a = RTA_NEXT(a, attributes_length)) {
        if (a->rta_type != INET_DIAG_INFO) continue;
        // Older kernels send a shorter tcp_info: take the counters only when they are there.
        tcp_info info{};
        std::memcpy(&info, RTA_DATA(a), std::min<size_t>(RTA_PAYLOAD(a), sizeof(info)));
        if (RTA_PAYLOAD(a) <
            offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received))
          continue;
        (*table)[diag->idiag_inode] =
            static_cast<int64_t>(info.tcpi_bytes_acked + info.tcpi_bytes_received);
      }
    }
  }
}

}  // namespace

absl::StatusOr<TcpBytes> ReadTcpBytes() {
  TcpBytes table;
  if (absl::Status s = Dump(AF_INET, &table); !s.ok()) return s;
  if (absl::Status s = Dump(AF_INET6, &table); !s.ok()) return s;
  return table;
}

absl::StatusOr<std::map<uint64_t, int64_t>> SocketBytesOf(pid_t pid, const TcpBytes& table) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* fds = opendir(dir.c_str());
  if (fds == nullptr) return absl::NotFoundError(absl::StrCat("cannot list ", dir));
  std::map<uint64_t, int64_t> out;
  while (dirent* entry = readdir(fds)) {
    char target[64];
    const ssize_t n = readlinkat(dirfd(fds), entry->d_name, target, sizeof(target) - 1);
    if (n <= 0) continue;  // "." and "..", or closed meanwhile
    const absl::string_view link(target, static_cast<size_t>(n));
    constexpr absl::string_view kPrefix = "socket:[";
    uint64_t inode = 0;
    if (link.substr(0, kPrefix.size()) != kPrefix || link.back() != ']' ||
        !absl::SimpleAtoi(link.substr(kPrefix.size(), link.size() - kPrefix.size() - 1), &inode)) {
      continue;
    }
    if (auto it = table.find(inode); it != table.end()) out[inode] = it->second;
  }
  closedir(fds);
  return out;
}

int64_t SocketBytesMoved(const std::map<uint64_t, int64_t>& before,
                         const std::map<uint64_t, int64_t>& after) {
  int64_t moved = 0;
  for (const auto& [inode, bytes] : after) {
    auto it = before.find(inode);
    moved += bytes - (it == before.end() ? 0 : it->second);
  }
  return moved;
}

}  // namespace asyncps::bench
