// A small harness around an Engine on a FakePlatform: dom0 (the hardware domain) and a few
// guests, with helpers that issue ops with valid arguments.
#pragma once

#include <cstring>
#include <memory>

#include "hvpmu/engine.h"
#include "hvprof/fake/fake_platform.h"
#include "hvpmu/pmu_drivers.h"

namespace hvprof::testing {

struct EngineHarness {
  explicit EngineHarness(uint32_t cpus = 2, hvprof::fake::CpuModel model =
                                                hvprof::fake::IntelArchPerfmonModel())
      : platform(cpus, std::move(model)), drivers(platform) {
    platform.AddDomain(0, 2, hvpmu::DomainType::kPv64, true);
    platform.AddDomain(1, 2, hvpmu::DomainType::kPv64);
    platform.AddDomain(2, 1, hvpmu::DomainType::kHvm);
    platform.AddDomain(3, 4, hvpmu::DomainType::kHvm);
    platform.AddDomain(4, 1, hvpmu::DomainType::kPv32);
    engine = std::make_unique<hvpmu::Engine>(platform, drivers.Detect());
  }

  template <typename T>
  hvpmu::ErrorCode Op(hvpmu::DomainId caller, uint32_t op, T* arg) {
    return engine->DoOp(caller, op, arg, sizeof(T));
  }
  hvpmu::ErrorCode Op(hvpmu::DomainId caller, uint32_t op) {
    return engine->DoOp(caller, op, nullptr, 0);
  }

  hvpmu::ErrorCode Init(hvpmu::DomainId caller, hvpmu::legacy::Init* out = nullptr) {
    hvpmu::legacy::Init init{};
    auto error = Op(caller, hvpmu::legacy::kOpInit, &init);
    if (out != nullptr) *out = init;
    return error;
  }
  hvpmu::ErrorCode GetBufferV2(hvpmu::DomainId caller, uint32_t capacity = 64,
                               hvpmu::BufferV2* out = nullptr) {
    hvpmu::BufferV2 buffer{};
    buffer.struct_size = sizeof buffer;
    buffer.abi_version = hvpmu::kAbiVersion;
    buffer.capacity = capacity;
    auto error = Op(caller, hvpmu::kOpGetBufferV2, &buffer);
    if (out != nullptr) *out = buffer;
    return error;
  }
  hvpmu::ErrorCode GetBufferLegacy(hvpmu::DomainId caller, int32_t max_samples = 64,
                                   hvpmu::legacy::GetBuffer* out = nullptr) {
    hvpmu::legacy::GetBuffer buffer{};
    buffer.max_samples = max_samples;
    auto error = Op(caller, hvpmu::legacy::kOpGetBuffer, &buffer);
    if (out != nullptr) *out = buffer;
    return error;
  }
  hvpmu::ErrorCode SetActive(hvpmu::DomainId domain) {
    hvpmu::legacy::DomainIdArg id = domain;
    return Op(0, hvpmu::legacy::kOpSetActive, &id);
  }
  hvpmu::ErrorCode SetPassiveV2(hvpmu::DomainId domain, uint32_t capacity = 64,
                                hvpmu::BufferV2* out = nullptr) {
    hvpmu::BufferV2 buffer{};
    buffer.struct_size = sizeof buffer;
    buffer.abi_version = hvpmu::kAbiVersion;
    buffer.domain = domain;
    buffer.capacity = capacity;
    auto error = Op(0, hvpmu::kOpSetPassiveV2, &buffer);
    if (out != nullptr) *out = buffer;
    return error;
  }
  hvpmu::ErrorCode SetPassiveLegacy(hvpmu::DomainId domain, int32_t max_samples = 64,
                                    hvpmu::legacy::Passive* out = nullptr) {
    hvpmu::legacy::Passive passive{};
    passive.domain_id = domain;
    passive.max_samples = max_samples;
    auto error = Op(0, hvpmu::legacy::kOpSetPassive, &passive);
    if (out != nullptr) *out = passive;
    return error;
  }
  // CPU_CLK_UNHALTED on counter `index`, kernel and user.
  hvpmu::ErrorCode Counter(uint32_t index = 0, uint64_t count = 100000, uint32_t event = 0x3C,
                           uint64_t unit_mask = 0) {
    hvpmu::legacy::Counter counter{};
    counter.ind = index;
    counter.count = count;
    counter.enabled = 1;
    counter.event = event;
    counter.kernel = 1;
    counter.user = 1;
    counter.unit_mask = unit_mask;
    return Op(0, hvpmu::legacy::kOpCounter, &counter);
  }
  hvpmu::Status Status(hvpmu::DomainId caller = 0) {
    auto status = std::make_unique<hvpmu::Status>();
    std::memset(status.get(), 0, sizeof *status);
    status->struct_size = sizeof(hvpmu::Status);
    status->abi_version = hvpmu::kAbiVersion;
    last_status_error = Op(caller, hvpmu::kOpStatus, status.get());
    return *status;
  }
  const hvpmu::DomainStatus* Find(const hvpmu::Status& status, hvpmu::DomainId domain) {
    for (uint32_t i = 0; i < status.num_domains; ++i) {
      if (status.domains[i].domain == domain) return &status.domains[i];
    }
    return nullptr;
  }

  hvprof::fake::FakePlatform platform;
  hvpmu::PmuDrivers drivers;
  std::unique_ptr<hvpmu::Engine> engine;
  hvpmu::ErrorCode last_status_error = hvpmu::ErrorCode::kOk;
};

}  // namespace hvprof::testing
