#include "hvprof/report/model.h"

#include <algorithm>
#include <array>

namespace hvprof::report {

Profile::Profile(ProfileParts parts) : parts_(std::move(parts)) {
  if (parts_.partial_context) whole_context_ = std::make_shared<WholeContext>();
}

std::vector<std::string> Profile::Warnings() const {
  std::vector<std::string> warnings;
  for (const Image& image : parts_.images) {
    if (image.build_id_mismatch) {
      warnings.push_back(fmt::format("{} is not the image that was profiled: {}", image.long_name, image.problem));
    } else if (!image.problem.empty()) {
      warnings.push_back(fmt::format("{} could not be symbolized: {}", image.long_name, image.problem));
    }
  }
  warnings.insert(warnings.end(), parts_.problems.begin(), parts_.problems.end());
  if (whole_context_) {
    const std::lock_guard lock(whole_context_->mutex);
    warnings.insert(warnings.end(), whole_context_->problems.begin(), whole_context_->problems.end());
  }
  warnings.insert(warnings.end(), parts_.stack_notes.begin(), parts_.stack_notes.end());
  return warnings;
}

const store::ContextIndex& Profile::context() const {
  if (!whole_context_) return *parts_.context;
  WholeContext& whole = *whole_context_;
  const std::lock_guard lock(whole.mutex);
  if (!whole.index) whole.index = parts_.ReadWholeContext(whole.problems, "processes are shown by pid");
  return *whole.index;
}

std::shared_ptr<const store::ContextIndex> ProfileParts::ReadWholeContext(std::vector<std::string>& problems_out,
                                                                          std::string_view without) const {
  auto index = std::make_shared<store::ContextIndex>();
  const std::string path = loaded_directory + "/" + store::kContextFile;
  auto read = store::ReadContextFile(path, metadata.session_id, *index);
  if (!read) {
    problems_out.push_back(fmt::format("{}; {}", read.error().message(), without));
  } else {
    for (const store::FileProblem& problem : read.value().problems) {
      problems_out.push_back(fmt::format("{} at byte {}: {}", path, problem.offset, problem.description));
    }
  }
  return index;
}

std::string ProfileParts::DomainName(uint16_t domain) const {
  for (const auto& record : metadata.domains) {
    if (record.id == domain) return store::DomainName(domain, record.name);
  }
  return store::DomainName(domain, "");
}

namespace {

// Linux's idle loop and its drivers (kernel/sched/idle.c, arch/x86/kernel/process.c,
// drivers/idle/, drivers/acpi/processor_idle.c, drivers/cpuidle/poll_state.c) and Xen's
// (xen/arch/x86/domain.c, cpu/mwait-idle.c, acpi/cpu_idle.c).
constexpr std::array<std::string_view, 17> kIdleFunctions = {
    "default_idle",     "default_idle_call",  "arch_cpu_idle",      "arch_safe_halt",
    "cpu_idle_poll",    "poll_idle",          "do_idle",            "native_safe_halt",
    "pv_native_safe_halt", "xen_safe_halt",   "acpi_safe_halt",     "acpi_processor_idle",
    "acpi_processor_ffh_cstate_enter",        "amd_e400_idle",      "idle_loop",
    "hlt_play_dead",    "cpuidle_idle_call",
};
// Families with many members: intel_idle, intel_idle_irq, mwait_idle_with_hints, acpi_idle_enter...
constexpr std::array<std::string_view, 3> kIdlePrefixes = {"intel_idle", "mwait_idle", "acpi_idle_"};

}  // namespace

bool IsIdleFunction(std::string_view name) {
  // GCC's clones (default_idle.constprop.0, poll_idle.isra.0) are the same function.
  name = name.substr(0, name.find('.'));
  if (std::find(kIdleFunctions.begin(), kIdleFunctions.end(), name) != kIdleFunctions.end()) return true;
  return std::any_of(kIdlePrefixes.begin(), kIdlePrefixes.end(),
                     [&](std::string_view prefix) { return name.starts_with(prefix); });
}

bool IsIdleSample(uint16_t domain, uint8_t mode, std::string_view symbol) {
  if (domain == kIdleDomain) return true;
  return mode != sample_mode::kUser && IsIdleFunction(symbol);
}

}  // namespace hvprof::report
