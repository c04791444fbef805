#include "net/method_table.h"

#include <algorithm>

#include "absl/strings/str_join.h"

namespace asyncps::net {

bool PeerRoles::Allows(absl::string_view role) const {
  return std::find(roles_.begin(), roles_.end(), role) != roles_.end();
}

std::string PeerRoles::ToString() const { return absl::StrJoin(roles_, ", "); }

const MethodTable::Entry* MethodTable::Find(absl::string_view method) const {
  auto it = methods_.find(method);
  return it == methods_.end() ? nullptr : &it->second;
}

}  // namespace asyncps::net
