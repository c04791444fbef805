#ifndef ASYNCPS_BENCH_SOCKET_BYTES_H_
#define ASYNCPS_BENCH_SOCKET_BYTES_H_

// Bytes a process moved through its TCP sockets, as the kernel counts them (tcp_info's bytes
// acked and bytes received, read for every socket of the machine through sock_diag netlink,
// as `ss -i` does). /proc/<pid>/io cannot say this: sendmsg/recvmsg, which Asio uses, are not
// counted there.

#include <sys/types.h>

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"

namespace asyncps::bench {

// Socket inode -> bytes sent (and acknowledged) plus bytes received, for every TCP socket
// (IPv4 and IPv6) of this network namespace. Internal when netlink refuses the query.
using TcpBytes = std::map<uint64_t, int64_t>;
absl::StatusOr<TcpBytes> ReadTcpBytes();

// The bytes of `table` through the sockets `pid` holds open (each socket's cumulative count,
// by inode); NotFound when the process is gone.
absl::StatusOr<std::map<uint64_t, int64_t>> SocketBytesOf(pid_t pid, const TcpBytes& table);

// Bytes moved between two readings of one process: sockets new in `after` count from zero,
// sockets closed since `before` are lost (scaling_bench's connections live for the whole run).
int64_t SocketBytesMoved(const std::map<uint64_t, int64_t>& before,
                         const std::map<uint64_t, int64_t>& after);

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_SOCKET_BYTES_H_
