#include "worker/program.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/dataset_resources.h"

namespace asyncps {

absl::StatusOr<std::string> ResourceContext::Arg(const std::string& name) const {
  auto it = args_.find(name);
  if (it == args_.end()) return absl::NotFoundError(absl::StrCat("missing argument '", name, "'"));
  return it->second;
}

absl::StatusOr<int64_t> ResourceContext::IntArg(const std::string& name) const {
  auto value = Arg(name);
  if (!value.ok()) return value.status();
  int64_t n;
  if (!absl::SimpleAtoi(*value, &n)) {
    return absl::InvalidArgumentError(absl::StrCat("argument '", name, "' is not an integer: ", *value));
  }
  return n;
}

Program& Program::AddFunction(const std::string& name, StepFunction fn) {
  functions_[name] = std::move(fn);
  return *this;
}

Program& Program::AddResource(const std::string& name, ResourceFactory factory) {
  resources_[name] = std::move(factory);
  return *this;
}

Program& Program::AddDataset(const std::string& name, DatasetFactory factory) {
  datasets_.insert(name);
  resources_[DatasetResourceName(name)] = MakeDatasetResourceFactory(name, factory);
  resources_[IteratorResourceName(name)] = MakeIteratorResourceFactory(name, std::move(factory));
  return *this;
}

const StepFunction* Program::FindFunction(const std::string& name) const {
  auto it = functions_.find(name);
  return it == functions_.end() ? nullptr : &it->second;
}

const ResourceFactory* Program::FindResource(const std::string& name) const {
  auto it = resources_.find(name);
  return it == resources_.end() ? nullptr : &it->second;
}

}  // namespace asyncps
