#ifndef ASYNCPS_DATA_SERVICE_STATUS_WATCH_H_
#define ASYNCPS_DATA_SERVICE_STATUS_WATCH_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "core/sync.h"
#include "metrics/status_board.h"

namespace asyncps::net {
class RpcClient;
}  // namespace asyncps::net

namespace asyncps::data_service {

// The chief's view of the tf.data service: asks the dispatcher for dispatcher.GetStatus every
// `interval` and shows the answer on the status board (StatusBoard::SetDataService; members
// "dispatcher" 0 and "data_worker" i with their state). A dispatcher that does not answer is
// shown "unreachable" with what it last said. Polls on a thread of its own; the destructor
// stops it. `dispatcher` and `board` must outlive the watch.
class StatusWatch {
 public:
  StatusWatch(net::RpcClient& dispatcher, std::string address, metrics::StatusBoard& board,
              absl::Duration interval = absl::Seconds(1));
  ~StatusWatch();

  StatusWatch(const StatusWatch&) = delete;
  StatusWatch& operator=(const StatusWatch&) = delete;

 private:
  void PollOnce();

  net::RpcClient& dispatcher_;
  const std::string address_;
  metrics::StatusBoard& board_;
  const absl::Duration interval_;
  metrics::StatusBoard::DataServiceStatus last_;  // the poll thread's only
  bool was_up_ = false;                           // the poll thread's only
  Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_STATUS_WATCH_H_
