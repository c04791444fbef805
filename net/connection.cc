#include "net/connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "net/silent_peer.h"

namespace asyncps::net {
namespace {

// Linux caps a single writev at IOV_MAX (1024) ranges; stay well below it.
constexpr size_t kMaxGatherRanges = 512;

uint64_t MaxSegmentTableBytes(const FrameLimits& limits) {
  return (4 * (uint64_t{limits.max_segments} + 1) + 7) / 8 * 8;
}

// Calls `fn(data, size)` for each range of `q`'s frame not yet written, until it returns false.
template <typename Fn>
void ForEachUnwrittenRange(const EncodedFrame& frame, size_t written, Fn&& fn) {
  size_t skip = written;
  for (const auto& r : frame.ranges) {
    if (skip >= r.size) {
      skip -= r.size;
      continue;
    }
    if (!fn(static_cast<const char*>(r.data) + skip, r.size - skip)) return;
    skip = 0;
  }
}

}  // namespace

Connection::Connection(tcp::socket socket, const FrameLimits& limits, metrics::RpcMetrics* metrics)
    : socket_(std::move(socket)),
      fd_(socket_.native_handle()),
      decoder_(limits),
      metrics_(metrics),
      read_buffer_(new capnp::word[kReadBufferBytes / sizeof(capnp::word)]),
      table_(kj::heapArray<capnp::word>(
          std::min<uint64_t>(MaxSegmentTableBytes(limits), kReadBufferBytes) / sizeof(capnp::word))),
      loop_thread_(std::this_thread::get_id()) {
  boost::system::error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  peer_address_ = ec ? "unknown" : absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
  socket_.set_option(tcp::no_delay(true), ec);
  DetectSilentPeers(fd_);
}

void Connection::Start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  ReadSome();
}

void Connection::Fail(const boost::system::error_code& ec, const char* what) {
  if (closed_) return;
  if (ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::operation_aborted || ec == asio::error::broken_pipe) {
    Close(absl::UnavailableError(absl::StrCat("connection to ", peer_address_, " closed")));
  } else {
    Close(absl::UnavailableError(
        absl::StrCat(what, " on connection to ", peer_address_, ": ", ec.message())));
  }
}

// ----- reading -------------------------------------------------------------------------------

void Connection::ReadSome() {
  // ParseBuffered asks for more only when the unparsed bytes are fewer than the step needs,
  // and no step needs more than the buffer holds, so after compacting there is room.
  auto* buffer = reinterpret_cast<uint8_t*>(read_buffer_.get());
  if (read_begin_ > 0) {
    std::memmove(buffer, buffer + read_begin_, read_end_ - read_begin_);
    read_end_ -= read_begin_;
    read_begin_ = 0;
  }
  socket_.async_read_some(
      asio::buffer(buffer + read_end_, kReadBufferBytes - read_end_),
      [this, self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
        if (ec) return Fail(ec, "read error");
        NoteProgress();
        read_end_ += n;
        if (metrics_ != nullptr) metrics_->AddBytesReceived(n);
        ProcessInput();
      });
}

void Connection::ProcessInput() {
  Cork();
  const bool read_more = ParseBuffered();
  // Re-arm the read before the responses go out: Asio tries the read at once (usually
  // EAGAIN), and that syscall is better spent before the peer is woken than after.
  if (read_more && !closed_) ReadSome();
  Uncork();
}

bool Connection::ParseBuffered() {
  const auto* buffer = reinterpret_cast<const uint8_t*>(read_buffer_.get());
  while (!closed_) {
    const uint8_t* data = buffer + read_begin_;
    const size_t available = read_end_ - read_begin_;

    if (stage_ == Stage::kPayloads) {
      const auto& ranges = decoder_.payload_buffers();
      while (payload_range_ < ranges.size() && read_begin_ < read_end_) {
        const auto& range = ranges[payload_range_];
        const size_t n = std::min(range.size - payload_offset_, read_end_ - read_begin_);
        std::memcpy(static_cast<char*>(range.data) + payload_offset_, buffer + read_begin_, n);
        read_begin_ += n;
        payload_offset_ += n;
        if (payload_offset_ == range.size) {
          ++payload_range_;
          payload_offset_ = 0;
        }
      }
      if (payload_range_ == ranges.size()) {
        DeliverFrame();
        continue;
      }
      // The buffer is drained and payload bytes are still to come.
      size_t remaining = 0;
      for (size_t i = payload_range_; i < ranges.size(); ++i) remaining += ranges[i].size;
      remaining -= payload_offset_;
      if (remaining < kDirectReadBytes) return true;
      if (!ReadPayloadsNow()) return false;
      continue;
    }

    // A frame starts at `data`. Every size is checked before anything is allocated for it.
    if (available < 4) return true;
    absl::StatusOr<size_t> table_bytes = decoder_.SegmentTableBytes(data);
    if (!table_bytes.ok()) {
      Close(table_bytes.status());
      return false;
    }
    if (*table_bytes > table_.size() * sizeof(capnp::word)) {
      Close(absl::InvalidArgumentError(absl::StrCat("frame segment table of ", *table_bytes,
                                                    " bytes exceeds the read buffer")));
      return false;
    }
    if (available < *table_bytes) return true;
    std::memcpy(table_.begin(), data, *table_bytes);  // the buffer offset need not be aligned
    absl::StatusOr<size_t> words =
        decoder_.HeaderWords(absl::MakeConstSpan(table_.begin(), *table_bytes / sizeof(capnp::word)));
    if (!words.ok()) {
      Close(words.status());
      return false;
    }
    const size_t header_bytes = *words * sizeof(capnp::word);
    if (available < header_bytes && header_bytes <= kReadBufferBytes) return true;
    auto header = kj::heapArray<capnp::word>(*words);
    const size_t have = std::min(available, header_bytes);
    std::memcpy(header.begin(), data, have);
    read_begin_ += have;
    if (have < header_bytes) {
      // Larger than the buffer: read the rest straight into the header's own array.
      ReadLargeHeader(std::move(header), have);
      return false;
    }
    if (!BeginPayloads(std::move(header))) return false;
  }
  return false;
}

bool Connection::BeginPayloads(kj::Array<capnp::word> words) {
  if (absl::Status s = decoder_.ParseHeader(std::move(words), placer_ ? &placer_ : nullptr); !s.ok()) {
    Close(s);
    return false;
  }
  stage_ = Stage::kPayloads;
  payload_range_ = 0;
  payload_offset_ = 0;
  return true;
}

void Connection::ReadLargeHeader(kj::Array<capnp::word> header, size_t have) {
  auto* bytes = reinterpret_cast<uint8_t*>(header.begin());
  auto buffer = asio::buffer(bytes + have, header.size() * sizeof(capnp::word) - have);
  asio::async_read(socket_, buffer, NotingProgress{this},
                   [this, self = shared_from_this(), header = std::move(header)](
                       const boost::system::error_code& ec, size_t n) mutable {
                     if (ec) return Fail(ec, "read error");
                     NoteProgress();  // the condition is not asked after the last part
                     if (metrics_ != nullptr) metrics_->AddBytesReceived(n);
                     if (BeginPayloads(std::move(header))) ProcessInput();
                   });
}

bool Connection::ReadPayloadsNow() {
  // Usually the rest of the frame has arrived already: read it here rather than through
  // async_read, whose completion costs another pass through the event loop (and epoll_wait).
  const auto& ranges = decoder_.payload_buffers();
  iovec iov[kMaxGatherRanges];
  while (payload_range_ < ranges.size()) {
    size_t count = 0;
    for (size_t i = payload_range_; i < ranges.size() && count < kMaxGatherRanges; ++i) {
      const size_t skip = i == payload_range_ ? payload_offset_ : 0;
      iov[count++] = {static_cast<char*>(ranges[i].data) + skip, ranges[i].size - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t n = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ReadPayloadsDirect();
        return false;
      }
      Fail(boost::system::error_code(errno, boost::system::system_category()), "read error");
      return false;
    }
    if (n == 0) {
      Fail(asio::error::eof, "read error");
      return false;
    }
    NoteProgress();
    if (metrics_ != nullptr) metrics_->AddBytesReceived(static_cast<uint64_t>(n));
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      const size_t room = ranges[payload_range_].size - payload_offset_;
      if (left < room) {
        payload_offset_ += left;
        break;
      }
      left -= room;
      ++payload_range_;
      payload_offset_ = 0;
    }
  }
  return true;
}

void Connection::ReadPayloadsDirect() {
  const auto& ranges = decoder_.payload_buffers();
  std::vector<asio::mutable_buffer> buffers;
  buffers.reserve(ranges.size() - payload_range_);
  for (size_t i = payload_range_; i < ranges.size(); ++i) {
    const size_t skip = i == payload_range_ ? payload_offset_ : 0;
    buffers.emplace_back(static_cast<char*>(ranges[i].data) + skip, ranges[i].size - skip);
  }
  // Payload bytes go straight from the socket into the aligned block: the one copy.
  asio::async_read(socket_, buffers, NotingProgress{this},
                   [this, self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                     if (ec) return Fail(ec, "read error");
                     NoteProgress();  // the condition is not asked after the last part
                     if (metrics_ != nullptr) metrics_->AddBytesReceived(n);
                     payload_range_ = decoder_.payload_buffers().size();
                     payload_offset_ = 0;
                     ProcessInput();  // delivers the frame, then reads on
                   });
}

void Connection::DeliverFrame() {
  stage_ = Stage::kFrameStart;
  InMessage message = decoder_.Finish();
  delivering_ = true;
  // Frame handlers are decode-error boundaries themselves; this is the backstop that keeps
  // one connection's failure from unwinding through the event loop.
  try {
    on_frame_(std::move(message));
  } catch (...) {
    delivering_ = false;
    Close(absl::InternalError("frame handler failed"));
    return;
  }
  delivering_ = false;
  if (closed_) on_frame_ = nullptr;
}

// ----- writing -------------------------------------------------------------------------------

void Connection::Send(OutMessage message) {
  Queued q{std::move(message), {}, 0};
  q.frame = EncodeFrame(q.message);  // the ranges view heap memory, so they survive moves of q
  // Only the loop thread reads corked_, and only the loop thread sets it.
  const bool corked = std::this_thread::get_id() == loop_thread_ && corked_;
  SentFrames sent;  // destroyed after unlocking: freeing big tensors takes a while
  bool schedule = false;
  {
    MutexLock lock(&send_mu_);
    if (send_closed_) return;
    queue_.push_back(std::move(q));
    if (corked) {
      queued_while_corked_ = true;
      return;
    }
    if (writer_active_) return;  // the loop thread writes it after what it is writing
    schedule = !WriteDirectLocked(&sent);
  }
  if (schedule) ScheduleWriteQueued();
}

void Connection::SendDeferred(OutMessage message, size_t flush_frames) {
  if (std::this_thread::get_id() == loop_thread_) return Send(std::move(message));
  Queued q{std::move(message), {}, 0};
  q.frame = EncodeFrame(q.message);
  SentFrames sent;  // destroyed after unlocking
  bool post = false;
  bool schedule = false;
  {
    MutexLock lock(&send_mu_);
    if (send_closed_) return;
    queue_.push_back(std::move(q));
    // The loop thread is writing: it takes this frame along.
    if (writer_active_) return;
    if (queue_.size() >= flush_frames) {
      // Enough for one write: send them now, so the peer works on these while this thread
      // makes the next ones (rather than the two taking turns with whole bursts).
      schedule = !WriteDirectLocked(&sent);
    } else if (!flush_posted_) {
      flush_posted_ = true;
      post = true;
    }
  }
  if (schedule) ScheduleWriteQueued();
  if (post) asio::post(socket_.get_executor(), [self = shared_from_this()] { self->FlushQueued(); });
}

void Connection::FlushQueued() {
  SentFrames sent;
  {
    MutexLock lock(&send_mu_);
    flush_posted_ = false;
    if (send_closed_ || writer_active_ || queue_.empty()) return;
    if (WriteDirectLocked(&sent)) return;
  }
  // The socket would block (or failed): the loop writes the rest asynchronously.
  WriteQueued();
}

bool Connection::WriteDirectLocked(SentFrames* sent) {
  iovec iov[kMaxGatherRanges];
  while (!queue_.empty()) {
    size_t count = 0;
    for (const Queued& q : queue_) {
      ForEachUnwrittenRange(q.frame, q.written, [&](const char* data, size_t size) {
        iov[count++] = {const_cast<char*>(data), size};
        return count < kMaxGatherRanges;
      });
      if (count == kMaxGatherRanges) break;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    // Never blocks, and a dead peer gives EPIPE rather than SIGPIPE.
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) write_errno_ = errno;
      writer_active_ = true;
      return false;
    }
    uint64_t frames = 0;
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      Queued& front = queue_.front();
      const size_t unwritten = front.frame.total_bytes - front.written;
      if (left < unwritten) {
        front.written += left;
        break;
      }
      left -= unwritten;
      sent->push_back(std::move(front));
      queue_.pop_front();
      ++frames;
    }
    if (metrics_ != nullptr) metrics_->RecordWrite(static_cast<uint64_t>(n), frames);
  }
  return true;
}

void Connection::ScheduleWriteQueued() {
  // Runs inline when already on the loop thread.
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->WriteQueued(); });
}

void Connection::WriteQueued() {
  std::vector<asio::const_buffer> buffers;
  int error = 0;
  {
    MutexLock lock(&send_mu_);
    if (send_closed_) return;
    error = write_errno_;
    if (error == 0) {
      while (!queue_.empty() &&
             (writing_.empty() || buffers.size() + queue_.front().frame.ranges.size() <= kMaxGatherRanges)) {
        Queued& q = queue_.front();
        ForEachUnwrittenRange(q.frame, q.written, [&](const char* data, size_t size) {
          buffers.emplace_back(data, size);
          return true;
        });
        writing_.push_back(std::move(q));
        queue_.pop_front();
      }
      if (writing_.empty()) {
        writer_active_ = false;
        return;
      }
    }
  }
  if (error != 0) {
    return Fail(boost::system::error_code(error, boost::system::system_category()), "write error");
  }
  asio::async_write(socket_, buffers, TransferAllUncapped(),
                    [this, self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                      const size_t frames = writing_.size();
                      writing_.clear();
                      if (ec) return Fail(ec, "write error");
                      if (metrics_ != nullptr) metrics_->RecordWrite(n, frames);
                      WriteQueued();
                    });
}

void Connection::Cork() { corked_ = true; }

void Connection::Uncork() {
  corked_ = false;
  if (!queued_while_corked_) return;  // nothing to flush: skip the lock
  queued_while_corked_ = false;
  SentFrames sent;
  bool schedule = false;
  {
    MutexLock lock(&send_mu_);
    if (send_closed_ || writer_active_ || queue_.empty()) return;
    schedule = !WriteDirectLocked(&sent);
  }
  if (schedule) WriteQueued();
}

void Connection::Close(const absl::Status& reason) {
  if (closed_) return;
  closed_ = true;
  SentFrames sent;
  FrameQueue dropped;
  {
    MutexLock lock(&send_mu_);
    // Best effort, without blocking: frames already queued still go out, e.g. answers to the
    // requests that came before the malformed frame this connection is closed for.
    if (!writer_active_ && write_errno_ == 0 && !queue_.empty()) WriteDirectLocked(&sent);
    // After this no direct write starts, and none is running: the descriptor may be closed.
    send_closed_ = true;
    dropped.swap(queue_);
  }
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  CloseHandler on_close = std::move(on_close_);
  on_close_ = nullptr;
  // Both handlers may own references that lead back here; dropping them breaks the cycle.
  // A frame handler that is running (it called Close) is dropped when it returns.
  if (!delivering_) on_frame_ = nullptr;
  if (on_close) on_close(reason);
}

}  // namespace asyncps::net
