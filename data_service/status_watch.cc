#include "data_service/status_watch.h"

#include "absl/strings/str_cat.h"
#include "data_service/data_service.capnp.h"
#include "net/rpc_client.h"
#include "net/message.h"

namespace asyncps::data_service {

StatusWatch::StatusWatch(net::RpcClient& dispatcher, std::string address, metrics::StatusBoard& board,
                         absl::Duration interval)
    : dispatcher_(dispatcher), address_(std::move(address)), board_(board), interval_(interval) {
  last_.dispatcher = address_;
  last_.dispatcher_state = "unreachable";
  board_.SetMember("dispatcher", 0, address_, "starting", 0);
  thread_ = std::thread([this] {
    while (true) {
      PollOnce();
      MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) return;
    }
  });
}

StatusWatch::~StatusWatch() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StatusWatch::PollOnce() {
  net::OutMessage request;
  request.InitRequestBody<wire::Empty>();
  absl::StatusOr<net::InMessage> response = dispatcher_.Call("dispatcher.GetStatus", std::move(request), interval_ * 2);
  metrics::StatusBoard::DataServiceStatus status;
  absl::Status s = response.status();
  if (s.ok()) {
    s = net::CatchDecodeErrors([&]() {
      auto body = response->ResponseBody<wire::ds::GetStatusResponse>();
      status.dispatcher = address_;
      status.dispatcher_state = "up";
      status.in_chief = body.getInChief();
      status.journal = body.getJournal().cStr();
      status.generation = body.getGeneration();
      status.datasets = body.getDatasets();
      status.num_jobs = body.getNumJobs();
      for (auto j : body.getJobs()) {
        status.jobs.push_back({j.getId(), j.getName().cStr(), j.getDatasetId(), j.getMode().cStr()});
      }
      for (auto w : body.getDataWorkers()) {
        status.data_workers.push_back({w.getTaskIndex(), w.getAddress().cStr(), w.getState().cStr(),
                                       w.getSecondsSinceHeartbeat(), w.getJobs(), w.getSplitStreams(),
                                       w.getElements()});
      }
      return absl::OkStatus();
    });
  }
  if (!s.ok()) {
    // What it said last, marked stale: the data workers may well be serving still.
    status = last_;
    status.dispatcher_state = "unreachable";
    if (was_up_) board_.AddEvent("dispatcher_unreachable", absl::StrCat("dispatcher ", address_, ": ", s.ToString()));
    was_up_ = false;
  } else {
    if (!was_up_ && last_.generation != 0 && status.generation != last_.generation) {
      board_.AddEvent("dispatcher_new_generation",
                      absl::StrCat("dispatcher ", address_, " restarted without a journal: generation ",
                                   absl::Hex(status.generation)));
    }
    was_up_ = true;
    last_ = status;
  }
  // The dispatcher's generation changes only when it starts without a journal: shown as its
  // incarnation, a change counts as a restart.
  board_.SetMember("dispatcher", 0, address_, status.dispatcher_state, status.generation);
  for (const auto& w : status.data_workers) {
    board_.SetMember("data_worker", w.index, w.address, s.ok() ? w.state : "unknown", 0);
  }
  board_.SetDataService(std::move(status));
}

}  // namespace asyncps::data_service
