#ifndef ASYNCPS_BENCH_WHOLE_TRANSFER_H_
#define ASYNCPS_BENCH_WHOLE_TRANSFER_H_

#include <cstddef>

#include "boost/system/error_code.hpp"

namespace asyncps::bench {

// A completion condition for asio::read / asio::write (and their async forms) that moves the
// whole buffer in as few system calls as the kernel allows. Asio's default, transfer_all,
// caps each read_some/write_some at 64 KiB, so a raw reference built on it alone makes 1024
// system calls to write 64 MiB where the PS's own connection writes as much as the socket takes
// per call: a reference slower than the system it is meant to bound (ps_bench measured it at
// 1.5-1.7 GB/s on loopback where the PS moved 2.4-4.1 GB/s). ps_bench times every pairing of
// the two for writes and reads and takes the fastest.
struct WholeTransfer {
  size_t operator()(const boost::system::error_code& ec, size_t /*transferred*/) const {
    return ec ? 0 : kMaxPerCall;
  }
  // Each call's limit; asio never asks for more than what is left of the buffer.
  static constexpr size_t kMaxPerCall = size_t{1} << 30;
};

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_WHOLE_TRANSFER_H_
