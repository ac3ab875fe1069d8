// The NMI sample path: mode classification, routing of every kind of domain in every mode,
// losses by cause, notifications, backtraces, and the PMI entry point.
#include <map>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "engine_test_support.h"
#include "hvprof/agent/ring_reader.h"

using namespace hvpmu;
using hvprof::agent::LegacyRingReader;
using hvprof::agent::LegacySample;
using hvprof::agent::RingReader;
using hvprof::testing::EngineHarness;

namespace {

InterruptedContext Context(DomainId domain, uint16_t vcpu, DomainType type, ring::Mode mode,
                           uint64_t ip = 0x1000) {
  InterruptedContext context{};
  context.domain = domain;
  context.vcpu = vcpu;
  context.type = type;
  context.ip = ip;
  context.pid = ring::kNoPid;
  context.tid = ring::kNoPid;
  switch (mode) {
    case ring::Mode::kHypervisor: context.in_hypervisor = true; break;
    case ring::Mode::kKernel:
      context.cpl = type == DomainType::kPv64 ? 3 : type == DomainType::kPv32 ? 1 : 0;
      context.pv_kernel_mode = true;
      break;
    case ring::Mode::kUser: context.cpl = 3; break;
  }
  return context;
}

struct Profiled {
  EngineHarness h{2};
  BufferV2 dom0{}, dom1{}, dom3{};

  // dom0 primary and active, dom1 active (PV), dom3 passive (HVM), dom2 and dom4 unprofiled.
  explicit Profiled(uint32_t backtrace_depth = 0) {
    auto must = [](ErrorCode error) { REQUIRE(ErrorName(error) == std::string("Ok")); };
    must(h.Init(0));
    must(h.GetBufferV2(0, 64, &dom0));
    must(h.SetActive(0));
    must(h.SetActive(1));
    must(h.SetPassiveV2(3, 64, &dom3));
    legacy::BacktraceDepthArg depth = backtrace_depth;
    must(h.Op(0, legacy::kOpSetBacktrace, &depth));
    must(h.Op(0, legacy::kOpReserveCounters));
    must(h.Counter());
    must(h.Op(0, legacy::kOpSetupEvents));
    must(h.Op(0, legacy::kOpEnableVirq));
    must(h.Init(1));
    must(h.GetBufferV2(1, 64, &dom1));
    must(h.Op(1, legacy::kOpEnableVirq));
    must(h.Op(0, legacy::kOpStart));
  }

  // Every sample in every ring of a region, with the ring index it came from.
  std::vector<std::pair<uint32_t, ring::SampleRecord>> Drain(const BufferV2& buffer) {
    std::vector<std::pair<uint32_t, ring::SampleRecord>> out;
    auto* base = static_cast<uint8_t*>(h.platform.RegionBase(buffer.region_handle));
    REQUIRE(base != nullptr);
    for (uint32_t i = 0; i < buffer.nbuf; ++i) {
      auto reader = RingReader::Attach(base + i * buffer.ring_bytes, buffer.ring_bytes,
                                       buffer.capacity);
      REQUIRE(reader.has_value());
      reader.value().Drain([&](const ring::SampleRecord& record, std::span<const uint64_t>) {
        out.emplace_back(i, record);
      });
    }
    return out;
  }
  const ring::RingHeader& Header(const BufferV2& buffer, uint32_t index) {
    auto* base = static_cast<uint8_t*>(h.platform.RegionBase(buffer.region_handle));
    return *reinterpret_cast<const ring::RingHeader*>(base + index * buffer.ring_bytes);
  }
};

}  // namespace

TEST_CASE("mode classification follows the guest type", "[sample-path]") {
  auto classify = [](DomainType type, uint8_t cpl, bool kernel_flag, bool real = false,
                     bool vm86 = false, bool hyp = false) {
    InterruptedContext context{};
    context.type = type;
    context.cpl = cpl;
    context.pv_kernel_mode = kernel_flag;
    context.hvm_real_mode = real;
    context.hvm_vm86 = vm86;
    context.in_hypervisor = hyp;
    return ClassifyMode(context);
  };
  using M = ring::Mode;
  // 64-bit PV: both guest kernel and user run at CPL 3; the kernel-mode flag tells them apart.
  CHECK(classify(DomainType::kPv64, 3, true) == M::kKernel);
  CHECK(classify(DomainType::kPv64, 3, false) == M::kUser);
  // 32-bit PV: the guest kernel runs in ring 1.
  CHECK(classify(DomainType::kPv32, 1, false) == M::kKernel);
  CHECK(classify(DomainType::kPv32, 3, false) == M::kUser);
  // HVM: CPL decides, real mode is kernel, vm86 is user.
  CHECK(classify(DomainType::kHvm, 0, false) == M::kKernel);
  CHECK(classify(DomainType::kHvm, 1, false) == M::kKernel);
  CHECK(classify(DomainType::kHvm, 3, false) == M::kUser);
  CHECK(classify(DomainType::kHvm, 3, false, true) == M::kKernel);
  CHECK(classify(DomainType::kHvm, 0, false, false, true) == M::kUser);
  // A hypervisor frame is hypervisor mode whatever the guest was doing.
  for (DomainType type : {DomainType::kPv64, DomainType::kPv32, DomainType::kHvm}) {
    CHECK(classify(type, 3, true, false, false, true) == M::kHypervisor);
  }
}

TEST_CASE("routing: every kind of domain in every mode", "[sample-path]") {
  struct Kind {
    const char* name;
    DomainId domain;
    DomainType type;
  };
  const Kind kinds[] = {{"primary (active)", 0, DomainType::kPv64},
                        {"active guest", 1, DomainType::kPv64},
                        {"passive guest", 3, DomainType::kHvm},
                        {"unprofiled guest", 2, DomainType::kHvm},
                        {"idle", kDomainIdle, DomainType::kPv64}};
  for (const Kind& kind : kinds) {
    for (ring::Mode mode : {ring::Mode::kUser, ring::Mode::kKernel, ring::Mode::kHypervisor}) {
      if (kind.domain == kDomainIdle && mode != ring::Mode::kHypervisor) continue;
      INFO(kind.name << " mode " << static_cast<int>(mode));
      Profiled p;
      const uint32_t cpu = 1;
      p.h.engine->RecordSample(cpu, Context(kind.domain, 1, kind.type, mode, 0xABC), 0, 100000);
      auto in_dom0 = p.Drain(p.dom0);
      auto in_dom1 = p.Drain(p.dom1);
      auto in_dom3 = p.Drain(p.dom3);
      Status status = p.h.Status(0);
      const auto unprofiled =
          status.lost[static_cast<int>(ring::LossReason::kUnprofiledDomain)];
      CHECK(status.total_samples == 1);

      std::vector<std::pair<uint32_t, ring::SampleRecord>>* where = nullptr;
      uint32_t expected_ring = 1;  // the vCPU
      switch (kind.domain) {
        case 0: where = &in_dom0; break;
        case 1: where = &in_dom1; break;
        case 3: where = &in_dom3; break;
        case kDomainIdle: where = &in_dom0; expected_ring = p.dom0.nbuf_vcpu + cpu; break;
        default: break;
      }
      const size_t total = in_dom0.size() + in_dom1.size() + in_dom3.size();
      if (where == nullptr) {
        CHECK(total == 0);
        CHECK(unprofiled == 1);
        // dom0 sees the loss in the header of its ring for that physical CPU.
        CHECK(p.Header(p.dom0, p.dom0.nbuf_vcpu + cpu)
                  .lost[static_cast<int>(ring::LossReason::kUnprofiledDomain)] == 1);
        continue;
      }
      REQUIRE(total == 1);
      REQUIRE(where->size() == 1);
      const auto& [ring_index, record] = where->front();
      CHECK(ring_index == expected_ring);
      CHECK(record.domain == kind.domain);
      CHECK(record.mode == static_cast<uint8_t>(mode));
      CHECK(record.ip == 0xABC);
      CHECK(record.pcpu == cpu);
      CHECK(record.period == 100000);
      CHECK(unprofiled == 0);
      if (kind.domain == kDomainIdle) {
        CHECK(status.idle_samples == 1);
        // Idle samples sit in dom0's pCPU rings but are not dom0's own samples.
        const DomainStatus* primary = p.h.Find(status, 0);
        REQUIRE(primary != nullptr);
        CHECK(primary->samples[0] + primary->samples[1] + primary->samples[2] == 0);
      } else {
        const DomainStatus* entry = p.h.Find(status, kind.domain);
        REQUIRE(entry != nullptr);
        CHECK(entry->samples[static_cast<int>(mode)] == 1);
      }
    }
  }
}

TEST_CASE("a listed domain that has not called enable_virq is not profiled", "[sample-path]") {
  Profiled p;
  REQUIRE(p.h.Op(0, legacy::kOpStop) == ErrorCode::kOk);
  REQUIRE(p.h.Op(1, legacy::kOpDisableVirq) == ErrorCode::kOk);
  p.h.engine->RecordSample(0, Context(1, 0, DomainType::kPv64, ring::Mode::kKernel), 0, 1);
  Status status = p.h.Status(0);
  CHECK(status.lost[static_cast<int>(ring::LossReason::kUnprofiledDomain)] == 1);
  CHECK(p.h.Find(status, 1)->activated == 0);
}

TEST_CASE("a vCPU without a ring is counted, not dropped silently", "[sample-path]") {
  Profiled p;
  p.h.engine->RecordSample(0, Context(1, 5, DomainType::kPv64, ring::Mode::kUser), 0, 1);
  p.h.engine->RecordSample(1, Context(1, 7, DomainType::kPv64, ring::Mode::kUser), 0, 1);
  Status status = p.h.Status(0);
  CHECK(p.h.Find(status, 1)->lost[static_cast<int>(ring::LossReason::kNoRing)] == 2);
  CHECK(status.lost[static_cast<int>(ring::LossReason::kNoRing)] == 2);
  CHECK(p.Header(p.dom1, 0).lost[static_cast<int>(ring::LossReason::kNoRing)] == 2);
  // The guest sees its own count too.
  CHECK(p.h.Status(1).domains[0].lost[static_cast<int>(ring::LossReason::kNoRing)] == 2);
}

TEST_CASE("a full ring counts ring-full losses per domain", "[sample-path]") {
  Profiled p;
  for (int i = 0; i < 100; ++i) {
    p.h.engine->RecordSample(0, Context(3, 0, DomainType::kHvm, ring::Mode::kKernel), 0, 1);
  }
  Status status = p.h.Status(0);
  const DomainStatus* passive = p.h.Find(status, 3);
  CHECK(passive->samples[1] == 64);
  CHECK(passive->lost[static_cast<int>(ring::LossReason::kRingFull)] == 36);
  CHECK(passive->max_fill == 64);
  CHECK(status.lost[static_cast<int>(ring::LossReason::kRingFull)] == 36);
}

TEST_CASE("notifications go to the ring's consumer at the watermark", "[sample-path]") {
  Profiled p;
  p.h.platform.ClearNotifications();
  for (int i = 0; i < 40; ++i) {
    p.h.engine->RecordSample(0, Context(1, 1, DomainType::kPv64, ring::Mode::kUser), 0, 1);
    p.h.engine->RecordSample(0, Context(3, 2, DomainType::kHvm, ring::Mode::kKernel), 0, 1);
    p.h.engine->RecordSample(1, Context(kDomainIdle, 0, DomainType::kPv64,
                                        ring::Mode::kHypervisor), 0, 1);
  }
  // Watermark 32 of 64: one notification per ring, not one per sample.
  std::map<std::tuple<int, int, int>, int> seen;
  for (const auto& n : p.h.platform.notifications()) ++seen[{n.consumer, n.owner, n.ring}];
  std::map<std::tuple<int, int, int>, int> expected = {
      {{1, 1, 1}, 1},                                     // the guest's own vCPU 1 ring
      {{0, 3, 2}, 1},                                     // passive ring, to dom0
      {{0, 0, static_cast<int>(p.dom0.nbuf_vcpu + 1)}, 1}  // dom0's pCPU 1 ring
  };
  CHECK(seen == expected);
}

TEST_CASE("backtraces: frame-pointer walk to the configured depth", "[sample-path]") {
  auto frame = [](uint64_t next, uint64_t ret) {
    std::vector<uint8_t> bytes(16);
    std::memcpy(bytes.data(), &next, 8);
    std::memcpy(bytes.data() + 8, &ret, 8);
    return bytes;
  };
  for (uint32_t depth : {2u, 5u}) {
    INFO("depth " << depth);
    Profiled p(depth);
    p.h.platform.MapMemory(1, 0x1000, frame(0x2000, 0xAAA));
    p.h.platform.MapMemory(1, 0x2000, frame(0x3000, 0xBBB));
    p.h.platform.MapMemory(1, 0x3000, frame(0x2800, 0xCCC));  // goes down: the walk stops
    p.h.platform.MapMemory(kDomainXen, 0x9000, frame(0, 0xFFF));
    auto guest = Context(1, 0, DomainType::kPv64, ring::Mode::kKernel);
    guest.frame_pointer = 0x1000;
    auto hypervisor = Context(1, 0, DomainType::kPv64, ring::Mode::kHypervisor);
    hypervisor.frame_pointer = 0x9000;
    p.h.engine->RecordSample(0, guest, 0, 1);
    p.h.engine->RecordSample(0, hypervisor, 0, 1);

    auto* base = static_cast<uint8_t*>(p.h.platform.RegionBase(p.dom1.region_handle));
    auto reader = RingReader::Attach(base, p.dom1.ring_bytes, p.dom1.capacity);
    REQUIRE(reader.has_value());
    std::vector<std::vector<uint64_t>> traces;
    std::vector<uint16_t> flags;
    reader.value().Drain([&](const ring::SampleRecord& record, std::span<const uint64_t> frames) {
      traces.emplace_back(frames.begin(), frames.end());
      flags.push_back(record.flags);
    });
    REQUIRE(traces.size() == 2);
    if (depth == 2) {
      CHECK(traces[0] == std::vector<uint64_t>{0xAAA, 0xBBB});
      CHECK((flags[0] & ring::kFlagBacktraceTruncated) != 0);
    } else {
      CHECK(traces[0] == std::vector<uint64_t>{0xAAA, 0xBBB, 0xCCC});
      CHECK((flags[0] & ring::kFlagBacktraceTruncated) == 0);
    }
    CHECK(traces[1] == std::vector<uint64_t>{0xFFF});  // read from hypervisor memory
  }
}

TEST_CASE("a PMI reads the overflowed counters and samples the interrupted context", "[sample-path]") {
  Profiled p;
  auto context = Context(1, 0, DomainType::kPv64, ring::Mode::kUser, 0x400123);
  context.pid = 77;
  context.tid = 78;
  context.address_space = 0x1234000;
  p.h.platform.SetContext(1, context);
  p.h.platform.SetMsr(1, 0x38E, 1);  // GLOBAL_STATUS: PMC0 overflowed
  const uint32_t rearms = p.h.platform.rearm_count();
  p.h.engine->HandlePmi(1);
  CHECK(p.h.platform.rearm_count() == rearms + 1);
  CHECK(p.h.platform.GetMsr(1, 0x390) == 1);  // acknowledged
  auto samples = p.Drain(p.dom1);
  REQUIRE(samples.size() == 1);
  const ring::SampleRecord& record = samples[0].second;
  CHECK(record.ip == 0x400123);
  CHECK(record.event == 0);
  CHECK(record.period == 100000);
  CHECK(record.pid == 77);
  CHECK(record.tid == 78);
  CHECK(record.address_space == 0x1234000);
  CHECK((record.flags & ring::kFlagPidValid) != 0);
  CHECK((record.flags & ring::kFlagAddressSpaceValid) != 0);

  // A PMI with nothing overflowed records nothing.
  p.h.platform.SetMsr(1, 0x38E, 0);
  p.h.engine->HandlePmi(1);
  CHECK(p.Drain(p.dom1).empty());
}

TEST_CASE("legacy rings: Xen's routing and record format", "[sample-path][legacy]") {
  EngineHarness h;
  auto must = [](ErrorCode error) { REQUIRE(ErrorName(error) == std::string("Ok")); };
  legacy::GetBuffer own{};
  legacy::Passive passive{};
  must(h.Init(0));
  must(h.GetBufferLegacy(0, 16, &own));
  must(h.SetActive(0));
  must(h.SetPassiveLegacy(3, 16, &passive));
  must(h.Op(0, legacy::kOpReserveCounters));
  must(h.Counter());
  must(h.Op(0, legacy::kOpSetupEvents));
  must(h.Op(0, legacy::kOpEnableVirq));
  must(h.Op(0, legacy::kOpStart));

  h.engine->RecordSample(0, Context(0, 1, DomainType::kPv64, ring::Mode::kUser, 0x11), 0, 1);
  h.engine->RecordSample(0, Context(0, 1, DomainType::kPv64, ring::Mode::kHypervisor, 0x22), 0, 1);
  h.engine->RecordSample(0, Context(3, 0, DomainType::kHvm, ring::Mode::kKernel, 0x33), 0, 1);
  h.engine->RecordSample(1, Context(kDomainIdle, 0, DomainType::kPv64, ring::Mode::kHypervisor), 0, 1);

  auto read = [&](uint64_t handle, uint32_t bufsize, uint32_t index) {
    auto* base = static_cast<uint8_t*>(h.platform.RegionBase(handle)) + index * bufsize;
    const uint32_t size = (bufsize - 48) / 16 + 1;
    auto reader = LegacyRingReader::Attach(base, bufsize + 16, size);
    REQUIRE(reader.has_value());
    std::vector<std::pair<uint64_t, int>> out;
    reader.value().Drain([&](const LegacySample& s) { out.emplace_back(s.ip, s.mode); });
    return out;
  };
  CHECK(read(own.buf_gmaddr, own.bufsize, 1) ==
        std::vector<std::pair<uint64_t, int>>{{0x11, legacy::kModeUser}, {0x22, legacy::kModeXen}});
  CHECK(read(passive.buf_gmaddr, passive.bufsize, 0) ==
        std::vector<std::pair<uint64_t, int>>{{0x33, legacy::kModeKernel}});
  // No pCPU rings in the legacy ABI: the idle sample is counted, as Xen does.
  Status status = h.Status(0);
  CHECK(status.idle_samples == 1);
  CHECK(status.lost[static_cast<int>(ring::LossReason::kUnprofiledDomain)] == 1);
}
