#include "hvprof/report/model.h"

namespace hvprof::report {

std::vector<std::string> Profile::Warnings() const {
  std::vector<std::string> warnings;
  for (const Image& image : images_) {
    if (image.build_id_mismatch) {
      warnings.push_back(fmt::format("{} is not the image that was profiled: {}", image.long_name, image.problem));
    } else if (!image.problem.empty()) {
      warnings.push_back(fmt::format("{} could not be symbolized: {}", image.long_name, image.problem));
    }
  }
  warnings.insert(warnings.end(), problems_.begin(), problems_.end());
  warnings.insert(warnings.end(), stack_notes_.begin(), stack_notes_.end());
  return warnings;
}

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
