#ifndef ASYNCPS_NET_CONNECTION_H_
#define ASYNCPS_NET_CONNECTION_H_

// Private to net/: one framed TCP connection. Includes Asio, so only net .cc files include it.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "metrics/rpc_metrics.h"
#include "net/asio.h"
#include "net/fifo.h"
#include "net/frame_codec.h"
#include "net/message.h"

namespace asyncps::net {

// Reads frames through a per-connection buffer and writes frames with gather writes.
//
// Reading (loop thread): one async_read_some fills the buffer, and every complete frame in it
// is parsed and delivered, so a small frame costs one read and many small frames can share
// one. Each size is checked (FrameLimits) before anything is allocated for it. A payload
// remainder of kDirectReadBytes or more is read straight into the frame's aligned block (or
// where the payload placer put it), after copying the part that was already buffered.
//
// Writing (any thread): Send writes the frame at once from the calling thread with one
// non-blocking gather write when nothing else is queued or being written, which spares a
// thread switch per message. Otherwise, or when the socket would block, the frame is queued
// and the loop thread writes the queue with async_write. SendDeferred always queues and
// leaves the write to the loop thread, so frames sent in a burst go out together. `send_mu_` makes every write to the
// socket exclusive and orders them against Close, so the descriptor is never written after it
// was closed (and possibly reused). While the loop delivers a batch of frames the connection
// is corked: responses the loop thread sends meanwhile are queued and written together
// afterwards.
//
// Thread-safety: Send is thread-safe; every other method, and the constructor, must be called
// on the socket's EventLoop thread. Lifetime is shared: pending async operations hold a
// reference.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using FrameHandler = std::function<void(InMessage)>;
  // Called once, with the reason, when the connection closes for any reason.
  using CloseHandler = std::function<void(const absl::Status&)>;

  // Bytes of the read buffer. A frame header (segment table and envelope) up to this size is
  // parsed in place; a larger one is read straight into its own array.
  static constexpr size_t kReadBufferBytes = 16 << 10;
  // Payload remainders at least this large bypass the buffer.
  static constexpr size_t kDirectReadBytes = 4 << 10;

  Connection(tcp::socket socket, const FrameLimits& limits, metrics::RpcMetrics* metrics);

  void Start(FrameHandler on_frame, CloseHandler on_close);
  // Limits for the frames after the current one (call from the frame handler, or before
  // Start). Their max_segments must not exceed the constructor's.
  void SetLimits(const FrameLimits& limits) { decoder_.set_limits(limits); }
  // Asked, for each frame with payloads once its header is checked, where they go
  // (FrameDecoder::ParseHeader). Call before Start. Runs on the loop thread.
  void SetPayloadPlacer(PayloadPlacer placer) { placer_ = std::move(placer); }
  // Thread-safe. Frames sent after the connection closed are dropped (the close handler has
  // reported, or will report, why).
  void Send(OutMessage message) ABSL_LOCKS_EXCLUDED(send_mu_);
  // Thread-safe. Like Send, but from a thread other than the loop's the frame is only queued:
  // the loop thread writes everything queued by the time it gets to it in one gather write
  // (one post per batch, not per frame), or this thread does once `flush_frames` are
  // queued. For a caller with other calls in flight, whose next frames are likely a moment
  // behind this one: they then share one system call on each side instead of waking the
  // peer once per frame.
  void SendDeferred(OutMessage message, size_t flush_frames) ABSL_LOCKS_EXCLUDED(send_mu_);
  void Close(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(send_mu_);

  // When bytes last arrived from the peer (any read that returned data, part of a frame
  // included), or absl::InfinitePast() if never. A frame still arriving is a peer that is not
  // silent; one behind a partition sends nothing. Writes do not count: the kernel takes a few
  // MB into the socket's send buffer whether or not the peer is there (a 0.94 MB push to a
  // partitioned PS "completes" at once). Any thread.
  absl::Time last_progress() const {
    const int64_t nanos = last_progress_nanos_.load(std::memory_order_relaxed);
    return nanos == 0 ? absl::InfinitePast() : absl::FromUnixNanos(nanos);
  }
  bool closed() const { return closed_; }
  const std::string& peer_address() const { return peer_address_; }

 private:
  struct Queued {
    OutMessage message;
    EncodedFrame frame;  // views `message`
    size_t written = 0;  // bytes of `frame` already on the wire
  };
  // Frames written by a direct write, freed once the lock is released. Inline: a send that
  // writes a frame or a few at once allocates nothing for them.
  using SentFrames = absl::InlinedVector<Queued, 4>;
  using FrameQueue = Fifo<Queued>;
  enum class Stage { kFrameStart, kPayloads };

  // ----- reading (loop thread) -----
  // Reads more bytes into the buffer, then ProcessInput.
  void ReadSome();
  // Delivers every complete frame in the buffer; then reads more, unless a direct read of a
  // large header or payload was started instead or the connection closed.
  void ProcessInput();
  // Returns true when the buffer needs more bytes. Closes the connection on malformed input.
  bool ParseBuffered();
  // Parses and validates the complete header `words`, then moves on to its payloads.
  bool BeginPayloads(kj::Array<capnp::word> words);
  void ReadLargeHeader(kj::Array<capnp::word> header, size_t have);
  // Reads the payload remainder straight into the frame's block without blocking. True when
  // the payloads are complete; false when it started ReadPayloadsDirect or closed.
  bool ReadPayloadsNow();
  // Reads the payload remainder straight into the frame's block with async_read.
  void ReadPayloadsDirect();
  void DeliverFrame();

  // ----- writing -----
  // Writes queue_ without blocking until it is empty (true) or the socket would block or
  // failed (false: writer_active_ is set and WriteQueued must run on the loop thread).
  bool WriteDirectLocked(SentFrames* sent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  // Loop thread: writes queue_ with async_write until it is empty, then clears writer_active_.
  void WriteQueued() ABSL_LOCKS_EXCLUDED(send_mu_);
  // Runs WriteQueued on the loop thread: at once when called there, else posted.
  void ScheduleWriteQueued();
  // Loop thread: writes what SendDeferred queued.
  void FlushQueued() ABSL_LOCKS_EXCLUDED(send_mu_);
  void Cork() ABSL_LOCKS_EXCLUDED(send_mu_);
  void Uncork() ABSL_LOCKS_EXCLUDED(send_mu_);

  // Turns an Asio read/write error into a close with a readable reason.
  void Fail(const boost::system::error_code& ec, const char* what);
  void NoteProgress() {
    last_progress_nanos_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_relaxed);
  }
  // An async_read completion condition: TransferAllUncapped's, noting progress each time part
  // of the frame has arrived (asio asks before every read_some).
  struct NotingProgress {
    Connection* connection;
    size_t operator()(const boost::system::error_code& ec, size_t transferred) const {
      if (transferred > 0) connection->NoteProgress();
      return TransferAllUncapped()(ec, transferred);
    }
  };

  tcp::socket socket_;
  const int fd_;  // socket_'s descriptor, for direct writes from any thread (under send_mu_)
  FrameDecoder decoder_;
  metrics::RpcMetrics* const metrics_;
  std::string peer_address_;
  FrameHandler on_frame_;
  CloseHandler on_close_;
  PayloadPlacer placer_;
  bool closed_ = false;
  bool delivering_ = false;  // inside on_frame_: Close must not destroy it yet

  // Read state. The buffer is 8-byte aligned; [read_begin_, read_end_) is not yet parsed.
  std::unique_ptr<capnp::word[]> read_buffer_;
  size_t read_begin_ = 0;
  size_t read_end_ = 0;
  Stage stage_ = Stage::kFrameStart;
  size_t payload_range_ = 0;   // decoder_.payload_buffers() index being filled
  size_t payload_offset_ = 0;  // bytes of that range already filled
  kj::Array<capnp::word> table_;  // scratch: the current frame's segment table, aligned

  // Write state.
  Mutex send_mu_;
  FrameQueue queue_ ABSL_GUARDED_BY(send_mu_);
  // The loop thread owns the socket's write side (an async_write is in flight or scheduled);
  // Send only queues.
  bool writer_active_ ABSL_GUARDED_BY(send_mu_) = false;
  // A FlushQueued is posted for frames SendDeferred queued.
  bool flush_posted_ ABSL_GUARDED_BY(send_mu_) = false;
  bool send_closed_ ABSL_GUARDED_BY(send_mu_) = false;
  int write_errno_ ABSL_GUARDED_BY(send_mu_) = 0;  // a direct write failed; the loop closes
  std::vector<Queued> writing_;  // loop thread: frames of the async_write in flight
  // Loop thread only (no lock, so a caller writing on this connection never holds the loop
  // up): while corked, Sends from the loop thread queue; Uncork writes what they queued.
  const std::thread::id loop_thread_;
  bool corked_ = false;
  bool queued_while_corked_ = false;
  // last_progress(): written by the loop thread as bytes arrive, read by any (an atomic, so the
  // read path takes no lock for it).
  std::atomic<int64_t> last_progress_nanos_{0};
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_CONNECTION_H_
