// What a platform says of its domains: which there are (their ids, names, types, vCPUs and the
// kernel each runs, where it knows), and the images an agent symbolizes a domain's samples
// with. hvprof-hv's hosts (linux, sim) make them and its protocol carries them (Domains,
// Context); Xen's link reads them from xenstore; the agents choose and check with them. One
// record each, one JSON codec.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"
#include "hvprof/base/result.h"

namespace hvprof::context {

struct DomainInfo {
  uint16_t id = 0;
  std::string name;    // empty where the platform has none
  std::string type;    // pv, pv32, hvm (guests), host (linux); empty where unknown (Xen)
  uint16_t vcpus = 0;
  std::string kernel;  // the kernel image it runs, where the platform knows (sim, linux host)
};

// The images of one domain, as its platform knows them; empty where it does not.
struct DomainImages {
  std::string hypervisor;  // dom0 only: the hypervisor's image (linux: the host kernel)
  std::string kernel;      // the domain's kernel
};

// The domain list: id, name and vcpus are required, type and kernel read as empty when absent.
nlohmann::json ToJson(const std::vector<DomainInfo>& domains);
Result<std::vector<DomainInfo>> ParseDomainList(const json::Node& node);
nlohmann::json ToJson(const DomainImages& images);
Result<DomainImages> ParseDomainImages(const json::Node& node);

}  // namespace hvprof::context
