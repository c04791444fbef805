#ifndef ASYNCPS_NET_ASIO_H_
#define ASYNCPS_NET_ASIO_H_

// The one place Boost.Asio is included. Internal to net/: include it only from .cc files or
// from net-private headers, never from a public header (it costs ~1.6 s per file).
//
// Boost 1.74 Asio with g++ 12 in C++20 mode uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>

namespace asyncps::net {
namespace asio = boost::asio;
using tcp = boost::asio::ip::tcp;

// A completion condition for asio::async_read / async_write that moves the whole buffer in as
// few system calls as the socket allows. Asio's default, transfer_all, caps every
// read_some / write_some at 64 KiB: a 4 MiB answer left in 64 writev calls (each a loopback
// wake-up of the reader) once the socket buffer first filled.
struct TransferAllUncapped {
  size_t operator()(const boost::system::error_code& ec, size_t /*transferred*/) const {
    return ec ? 0 : kMaxPerCall;
  }
  // Each call's limit; asio never asks for more than what is left of the buffers.
  static constexpr size_t kMaxPerCall = size_t{1} << 30;
};
}  // namespace asyncps::net

#endif  // ASYNCPS_NET_ASIO_H_
