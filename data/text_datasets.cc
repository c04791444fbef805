// Line-oriented sources: TextLines and LibSvm.

#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "data/dataset_node.h"
#include "data/file_list_iterator.h"

namespace asyncps::data::internal {
namespace {

class TextLinesIterator : public FileListIterator {
 public:
  using FileListIterator::FileListIterator;

 protected:
  absl::StatusOr<std::optional<Element>> ReadRecord(InputStream& in) override {
    ASSIGN_OR_RETURN(bool more, in.ReadLine(&line_));
    if (!more) return std::nullopt;
    Tensor t(DType::kU8, {static_cast<int64_t>(line_.size())});
    if (!line_.empty()) std::memcpy(t.raw_data(), line_.data(), line_.size());
    return Element{std::move(t)};
  }

 private:
  std::string line_;
};

class TextLinesNode : public DatasetNode {
 public:
  explicit TextLinesNode(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  bool is_source() const override { return true; }
  int64_t num_files() const override { return static_cast<int64_t>(paths_.size()); }
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const override {
    auto it = std::make_unique<TextLinesIterator>(FilesOfShard(paths_, ctx));
    RETURN_IF_ERROR(it->Start());
    return it;
  }

 private:
  const std::vector<std::string> paths_;
};

// "label idx:value idx:value ... # comment"; blank and comment-only lines are skipped.
class LibSvmIterator : public FileListIterator {
 public:
  LibSvmIterator(std::string path, int64_t num_features)
      : FileListIterator({std::move(path)}), num_features_(num_features) {}

 protected:
  absl::StatusOr<std::optional<Element>> ReadRecord(InputStream& in) override {
    while (true) {
      ASSIGN_OR_RETURN(bool more, in.ReadLine(&line_));
      if (!more) return std::nullopt;
      ++line_number_;
      absl::string_view text = line_;
      if (size_t hash = text.find('#'); hash != absl::string_view::npos) {
        text = text.substr(0, hash);
      }
      std::vector<absl::string_view> tokens =
          absl::StrSplit(text, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
      if (tokens.empty()) continue;
      return Parse(in.path(), tokens);
    }
  }

 private:
  absl::StatusOr<std::optional<Element>> Parse(const std::string& path,
                                               const std::vector<absl::string_view>& tokens) {
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number_, ": bad libsvm line: ", what));
    };
    float label;
    if (!absl::SimpleAtof(tokens[0], &label)) {
      return bad(absl::StrCat("label '", tokens[0], "' is not a number"));
    }
    Tensor features(DType::kF32, {num_features_});
    float* dense = features.data<float>();
    for (size_t i = 1; i < tokens.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(tokens[i], ':');
      if (kv.first == "qid") continue;  // svmlight ranking groups: not a feature
      int64_t index;
      float value;
      if (!absl::SimpleAtoi(kv.first, &index) || !absl::SimpleAtof(kv.second, &value)) {
        return bad(absl::StrCat("'", tokens[i], "' is not index:value"));
      }
      if (index < 1 || index > num_features_) {
        return bad(absl::StrCat("feature index ", index, " outside 1..", num_features_));
      }
      dense[index - 1] = value;
    }
    return Element{std::move(features), Tensor::Scalar<float>(label)};
  }

  const int64_t num_features_;
  std::string line_;
  int64_t line_number_ = 0;
};

class LibSvmNode : public DatasetNode {
 public:
  LibSvmNode(std::string path, int64_t num_features)
      : path_(std::move(path)), num_features_(num_features) {}
  bool is_source() const override { return true; }
  int64_t num_files() const override { return 1; }  // FILE sharding admits one worker only
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const IteratorContext&) const override {
    if (num_features_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("LibSvm: num_features must be >= 1, got ", num_features_));
    }
    auto it = std::make_unique<LibSvmIterator>(path_, num_features_);
    RETURN_IF_ERROR(it->Start());
    return it;
  }

 private:
  const std::string path_;
  const int64_t num_features_;
};

}  // namespace

std::shared_ptr<const DatasetNode> MakeTextLinesNode(std::vector<std::string> paths) {
  return std::make_shared<TextLinesNode>(std::move(paths));
}
std::shared_ptr<const DatasetNode> MakeLibSvmNode(std::string path, int64_t num_features) {
  return std::make_shared<LibSvmNode>(std::move(path), num_features);
}

}  // namespace asyncps::data::internal
