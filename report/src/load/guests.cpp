// The rows guests published for dom0's report (--all-domains).
#include "profile_builder.h"

namespace hvprof::report {

void ProfileBuilder::AddPublishedSymbols(const std::vector<PublishedProfile>& published) {
  for (const PublishedProfile& guest : published) {
    const std::string prefix = fmt::format("domain{}:", guest.domain);
    for (const PublishedSymbol& row : guest.symbols) {
      const std::string name = prefix + row.image;
      const uint32_t image = ImageIndex(name, "", row.resolved);
      if (row.resolved) p_.images[image].has_symbols = true;
      const uint32_t symbol = SymbolIndex(image, row.symbol, row.address, row.resolved,
                                          row.resolved ? "" : "not resolved by the guest");
      for (size_t c = 0; c < row.samples.size(); ++c) {
        if (row.samples[c] == 0) continue;
        p_.entries.push_back({guest.domain, row.mode, static_cast<uint8_t>(guest.events[c].counter), kNoPid,
                               row.address, row.address, row.samples[c], image, symbol, kNoIndex});
        p_.total += row.samples[c];
      }
    }
  }
}

std::vector<PublishedProfile> ProfileBuilder::ReadPublished(ProfileParts& profile, store::Aggregate* aggregate,
                                                           uint64_t total) {
  std::vector<PublishedProfile> accepted;
  // `total` becomes the host's: each guest's rows add up to its `samples` (ParsePublished
  // checks), so a guest is taken only while the total stays a number.
  std::vector<uint16_t> guests;  // the active domains other than the agent's own
  for (const store::DomainRecord& domain : profile.metadata.domains) {
    if (domain.role == "active" && domain.id != profile.metadata.agent_domain) guests.push_back(domain.id);
  }
  for (uint16_t domain : guests) {
    const std::string path = fmt::format("{}/published/domain-{}.json", profile.directory, domain);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      profile.problems.push_back(fmt::format(
          "active domain {} has not published its profile ({}): its own samples are missing", profile.DomainName(domain),
          profile.metadata.platform == "xen"
              ? fmt::format("run `hvprof --publish` in it and copy the file it names to {}", path)
              : std::string("run `hvprof --publish` in it, then `hvprof --dump` here")));
      continue;
    }
    auto text = ReadFileToString(path, size_t{64} << 20, Links::kRefuse);
    auto parsed = text ? ParsePublished(text.value(), domain) : Result<PublishedProfile>(text.error());
    if (!parsed) {
      profile.problems.push_back(parsed.error().message() + "; not used");
      continue;
    }
    PublishedProfile& guest = parsed.value();
    // The guest's counters are dom0's: the same logical counter must count the same event.
    std::string mismatch;
    for (const PublishedEvent& event : guest.events) {
      const auto same = std::find_if(profile.metadata.events.begin(), profile.metadata.events.end(), [&](const store::EventRecord& e) {
        return e.counter == event.counter && e.name == event.name && e.count == event.count;
      });
      if (same == profile.metadata.events.end()) mismatch = fmt::format("{}:{} on counter {}", event.name, event.count, event.counter);
    }
    if (!mismatch.empty()) {
      profile.problems.push_back(fmt::format("domain {} published a profile of another session ({} is not counted here); not used",
                                      profile.DomainName(domain), mismatch));
      continue;
    }
    if (__builtin_add_overflow(total, guest.samples, &total)) {
      profile.problems.push_back(fmt::format("domain {} published {} samples, more than any host could have taken "
                                              "with the others; not used", profile.DomainName(domain), guest.samples));
      continue;
    }
    for (const PublishedAddress& address : guest.hypervisor) {
      for (size_t c = 0; c < address.samples.size(); ++c) {
        if (address.samples[c] == 0) continue;
        aggregate->entries.push_back({{address.ip, kNoPid, domain, kHypervisor,
                                       static_cast<uint8_t>(guest.events[c].counter)},
                                      address.samples[c]});
      }
    }
    profile.published.push_back({domain, guest.name, guest.samples, guest.published_ns, guest.losses});
    accepted.push_back(std::move(guest));
  }
  return accepted;
}

}  // namespace hvprof::report
