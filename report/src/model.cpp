#include "hvprof/report/model.h"

namespace hvprof::report {

std::string Profile::DomainName(uint16_t domain) const {
  if (domain == kIdleDomain) return "idle";
  for (const auto& record : metadata_.domains) {
    if (record.id == domain) {
      if (record.name.empty()) return std::to_string(domain);
      return domain == 0 ? record.name : fmt::format("{} ({})", domain, record.name);
    }
  }
  return std::to_string(domain);
}

}  // namespace hvprof::report
