#ifndef ASYNCPS_DATA_FILE_LIST_ITERATOR_H_
#define ASYNCPS_DATA_FILE_LIST_ITERATOR_H_

// Internal: the shared walk over a list of files for record readers (TFRecord, text lines,
// libsvm). Files are read one after another, each streamed through an InputStream.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/input_stream.h"

namespace asyncps::data::internal {

class FileListIterator : public Iterator {
 public:
  explicit FileListIterator(std::vector<std::string> paths) : paths_(std::move(paths)) {}

  // Opens the first file and checks that the others are readable, so that MakeIterator()
  // reports a missing file by name.
  absl::Status Start();

  // Next record of the current file, moving on to the next file at each end. Errors and the
  // end are sticky.
  absl::StatusOr<Element> Next() final;

  // The position is (file, records read in it): restoring opens that file and skips them.
  absl::StatusOr<std::string> SaveState() const final;
  absl::Status RestoreState(absl::string_view state) final;

 protected:
  // The next record of `in`, or nullopt at a clean end of that file.
  virtual absl::StatusOr<std::optional<Element>> ReadRecord(InputStream& in) = 0;

 private:
  const std::vector<std::string> paths_;
  size_t next_path_ = 0;
  std::unique_ptr<InputStream> current_;
  int64_t records_in_current_ = 0;  // records of the current file returned so far
  absl::Status status_;  // sticky end or error
};

}  // namespace asyncps::data::internal

#endif  // ASYNCPS_DATA_FILE_LIST_ITERATOR_H_
