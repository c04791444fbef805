#include "data/file_list_iterator.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace asyncps::data::internal {

absl::Status FileListIterator::Start() {
  for (size_t i = 1; i < paths_.size(); ++i) {
    if (::access(paths_[i].c_str(), R_OK) != 0) {
      std::string msg = absl::StrCat("cannot open ", paths_[i], ": ", std::strerror(errno));
      return errno == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
    }
  }
  if (!paths_.empty()) {
    ASSIGN_OR_RETURN(current_, InputStream::Open(paths_[0]));
    next_path_ = 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<Element> FileListIterator::Next() {
  while (status_.ok()) {
    if (current_ == nullptr) {
      if (next_path_ >= paths_.size()) {
        status_ = absl::OutOfRangeError("end of data");
        break;
      }
      absl::StatusOr<std::unique_ptr<InputStream>> in = InputStream::Open(paths_[next_path_++]);
      if (!in.ok()) {
        status_ = in.status();
        break;
      }
      current_ = *std::move(in);
    }
    absl::StatusOr<std::optional<Element>> record = ReadRecord(*current_);
    if (!record.ok()) {
      status_ = record.status();
      // A reader's OutOfRange must not pass for the end of data.
      if (IsEndOfData(status_)) status_ = absl::InternalError(status_.message());
      break;
    }
    if (record->has_value()) return **std::move(record);
    current_.reset();
  }
  return status_;
}

}  // namespace asyncps::data::internal
