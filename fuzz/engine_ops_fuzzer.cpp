// Fuzzes the engine's profiling operations as hostile guests would drive them: any caller, any
// op code, any argument bytes and size, in any order, with samples arriving in between. The
// engine must answer every call with a code, keep the platform's contract (the fake records
// every breach: double releases, freeing shared memory...) and never crash.
#include <algorithm>
#include <cstring>
#include <memory>

#include "hvpmu/engine.h"
#include "hvprof/fake/fake_platform.h"
#include "hvpmu/pmu_drivers.h"

using namespace hvpmu;
namespace fake = hvprof::fake;

namespace {

constexpr uint32_t kOps[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
                             kOpInitV2, kOpStatus, kOpGetBufferV2, kOpSetPassiveV2};

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return position_ >= size_; }
  uint8_t Byte() { return position_ < size_ ? data_[position_++] : 0; }
  size_t Take(uint8_t* out, size_t bytes) {
    const size_t n = std::min(bytes, size_ - std::min(position_, size_));
    if (n != 0) std::memcpy(out, data_ + position_, n);
    position_ += n;
    return n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fake::FakePlatform platform(2, fake::IntelArchPerfmonModel());
  platform.AddDomain(0, 2, DomainType::kPv64, true);
  platform.AddDomain(1, 2, DomainType::kPv64);
  platform.AddDomain(2, 1, DomainType::kHvm);
  PmuDrivers drivers(platform);
  auto engine = std::make_unique<Engine>(platform, drivers.Detect());

  alignas(64) uint8_t argument[16384];
  Input in(data, size);
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    const uint8_t what = in.Byte();
    if (what % 8 == 7) {
      // A sample on some CPU, in some domain and mode.
      InterruptedContext context{};
      context.domain = static_cast<DomainId>(in.Byte() % 4 == 3 ? kDomainIdle : in.Byte() % 3);
      context.vcpu = in.Byte() % 3;
      context.type = in.Byte() % 2 ? DomainType::kHvm : DomainType::kPv64;
      context.in_hypervisor = in.Byte() & 1;
      context.cpl = in.Byte() & 3;
      context.pv_kernel_mode = in.Byte() & 1;
      in.Take(reinterpret_cast<uint8_t*>(&context.ip), sizeof context.ip);
      context.pid = context.tid = ring::kNoPid;
      engine->RecordSample(in.Byte() % 2, context, in.Byte() % 8, 100000);
      continue;
    }
    if (what % 8 == 6) {
      const DomainId gone = in.Byte() % 3;
      if (in.Byte() & 1) {
        engine->OnConsumerGone(gone);
      } else {
        engine->OnDomainDestroyed(gone);
        platform.RemoveDomain(gone);
      }
      continue;
    }
    const DomainId caller = in.Byte() % 3;
    const uint32_t op = kOps[in.Byte() % (sizeof kOps / sizeof kOps[0])];
    const uint32_t arg_size = static_cast<uint32_t>(in.Byte()) * 64 + in.Byte() % 64;
    std::memset(argument, 0, sizeof argument);
    in.Take(argument, std::min<size_t>(arg_size, 256));
    (void)engine->DoOp(caller, op, arg_size == 0 ? nullptr : argument, std::min<uint32_t>(arg_size, sizeof argument));
  }
  engine.reset();
  if (!platform.violations().empty()) __builtin_trap();
  return 0;
}
