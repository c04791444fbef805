#include "data/file_list_iterator.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/iterator_state.h"

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
      records_in_current_ = 0;
    }
    absl::StatusOr<std::optional<Element>> record = ReadRecord(*current_);
    if (!record.ok()) {
      status_ = record.status();
      // A reader's OutOfRange must not pass for the end of data.
      if (IsEndOfData(status_)) status_ = absl::InternalError(status_.message());
      break;
    }
    if (record->has_value()) {
      ++records_in_current_;
      return **std::move(record);
    }
    current_.reset();
  }
  return status_;
}

absl::StatusOr<std::string> FileListIterator::SaveState() const {
  if (!status_.ok() && !IsEndOfData(status_)) return status_;  // a failed pass has no position
  StateWriter w("Files");
  // The file being read (next_path_ is one past it), or next_path_ between files.
  const int64_t file = static_cast<int64_t>(next_path_) - (current_ != nullptr ? 1 : 0);
  w.Int(IsEndOfData(status_) ? static_cast<int64_t>(paths_.size()) : file);
  w.Int(current_ != nullptr ? records_in_current_ : 0);
  return std::move(w).Finish();
}

absl::Status FileListIterator::RestoreState(absl::string_view state) {
  ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, "Files"));
  ASSIGN_OR_RETURN(int64_t file, r.Int());
  ASSIGN_OR_RETURN(int64_t records, r.Int());
  if (file < 0 || file > static_cast<int64_t>(paths_.size()) || records < 0) {
    return absl::InvalidArgumentError(absl::StrCat("iterator state: file ", file, " of ",
                                                   paths_.size(), ", record ", records));
  }
  current_.reset();
  next_path_ = static_cast<size_t>(file);
  status_ = absl::OkStatus();
  if (records == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(current_, InputStream::Open(paths_[next_path_++]));
  records_in_current_ = 0;
  for (; records_in_current_ < records; ++records_in_current_) {
    ASSIGN_OR_RETURN(std::optional<Element> skipped, ReadRecord(*current_));
    if (!skipped.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("iterator state: ", paths_[next_path_ - 1],
                                                     " has fewer than ", records, " records"));
    }
  }
  return absl::OkStatus();
}

}  // namespace asyncps::data::internal
