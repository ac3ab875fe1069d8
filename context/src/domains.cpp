#include "hvprof/context/domains.h"

namespace hvprof::context {

using Json = nlohmann::json;

namespace {

constexpr size_t kMaxDomains = 1u << 16;
constexpr size_t kMaxPath = 4096;

}  // namespace

Json ToJson(const std::vector<DomainInfo>& domains) {
  Json list = Json::array();
  for (const DomainInfo& d : domains) {
    list.push_back({{"id", d.id}, {"name", d.name}, {"type", d.type}, {"vcpus", d.vcpus}, {"kernel", d.kernel}});
  }
  return list;
}

Result<std::vector<DomainInfo>> ParseDomainList(const json::Node& node) {
  HVPROF_TRY(entries, node.Elements(kMaxDomains));
  std::vector<DomainInfo> domains;
  domains.reserve(entries.size());
  for (const json::Node& entry : entries) {
    DomainInfo d;
    HVPROF_TRY(id, entry.Get<uint16_t>("id"));
    HVPROF_TRY(name, entry.Get<std::string>("name"));
    HVPROF_TRY(vcpus, entry.Get<uint16_t>("vcpus"));
    HVPROF_TRY(type, entry.Get("type", ""));
    d.id = id;
    d.name = std::move(name);
    d.vcpus = vcpus;
    d.type = std::move(type);
    if (const std::optional<json::Node> kernel = entry.OptionalMember("kernel")) {
      HVPROF_TRY(path, kernel->String(kMaxPath));
      d.kernel = std::move(path);
    }
    domains.push_back(std::move(d));
  }
  return domains;
}

Json ToJson(const DomainImages& images) {
  return Json{{"hypervisor", images.hypervisor}, {"kernel", images.kernel}};
}

Result<DomainImages> ParseDomainImages(const json::Node& node) {
  if (!node.IsObject()) return node.Fail("expected an object, got {}", node.Describe());
  DomainImages images;
  for (auto [key, member] : {std::pair{"hypervisor", &DomainImages::hypervisor}, std::pair{"kernel", &DomainImages::kernel}}) {
    if (const std::optional<json::Node> path = node.OptionalMember(key)) {
      HVPROF_TRY(text, path->String(kMaxPath));
      images.*member = std::move(text);
    }
  }
  return images;
}

}  // namespace hvprof::context
