// The xen link over the fake Xen libraries (tests/xen-fake), which play Xen 4.17's xenoprof
// with hvprof's engine in hvprof-hv: the legacy op sequence, legacy rings read through
// foreign mappings and VIRQ_XENOPROF, checked against the simulator's ground truth; and Xen's
// refusals, each with its message.
#include <poll.h>
#include <sys/mman.h>
#include <stdlib.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <catch2/catch.hpp>

#include "hvprof/agent/ring_reader.h"
#include "hvprof/xen/xen_link.h"
#include "hvprof/xen/xenctrl_subset.h"
#include "hvpmu/abi/xen_trace.h"
#include "hvprof/hv/protocol.h"

extern "C" {
#include <xenforeignmemory.h>
}
#include "host_harness.h"
#include "sim_harness.h"

using namespace hvprof;
using hvprof::testing::Host;
using hvprof::testing::TempDir;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;
namespace legacy = hvpmu::legacy;

namespace {

// A /sys and /proc that say "Xen dom0".
std::string XenRoot(const TempDir& dir) {
  const std::string root = dir.File("xen-root");
  std::filesystem::create_directories(root + "/sys/hypervisor/version");
  std::filesystem::create_directories(root + "/proc/xen");
  std::ofstream(root + "/sys/hypervisor/type") << "xen\n";
  std::ofstream(root + "/sys/hypervisor/version/major") << "4\n";
  std::ofstream(root + "/sys/hypervisor/version/minor") << "17\n";
  std::ofstream(root + "/proc/xen/capabilities") << "control_d\n";
  return root;
}

std::unique_ptr<agent::HypervisorLink> ConnectThroughFake(const Host& host, const std::string& root) {
  ::setenv("HVPROF_FAKE_XEN_RUN_DIR", host.run_dir().c_str(), 1);
  ::setenv("HVPROF_FAKE_XEN_DOMAIN", "0", 1);
  auto link = xen::ConnectXen(0, root);
  INFO((link ? std::string() : link.error().message()));
  REQUIRE(link.has_value());
  return std::move(link).value();
}

hvpmu::ErrorCode Run(agent::HypervisorLink& link, uint32_t op) {
  auto code = agent::RunOp(link, op);
  REQUIRE(code.has_value());
  return code.value();
}
template <typename T>
hvpmu::ErrorCode Run(agent::HypervisorLink& link, uint32_t op, T* argument) {
  auto code = agent::RunOp(link, op, argument);
  REQUIRE(code.has_value());
  return code.value();
}

// The legacy rings of one buffer, read as dom0's agent would.
struct LegacyBuffer {
  agent::MappedRegion region;
  std::vector<agent::LegacyRingReader> readers;

  LegacyBuffer(agent::HypervisorLink& link, uint64_t address, int32_t nbuf, int32_t bufsize) {
    auto mapped = link.MapRegion(address, uint64_t(nbuf) * uint64_t(bufsize));
    INFO((mapped ? std::string() : mapped.error().message()));
    REQUIRE(mapped.has_value());
    region = std::move(mapped).value();
    const auto size = static_cast<uint32_t>((bufsize - legacy::kBufHeaderSize) / sizeof(legacy::EventLog));
    for (int32_t i = 0; i < nbuf; ++i) {
      auto reader = agent::LegacyRingReader::Attach(region.base() + uint64_t(i) * uint64_t(bufsize),
                                                    uint64_t(bufsize), size);
      REQUIRE(reader.has_value());
      readers.push_back(std::move(reader).value());
    }
  }
  void Drain(std::map<uint8_t, uint64_t>& per_mode) {
    for (auto& reader : readers) {
      reader.Drain([&](const agent::LegacySample& sample) { ++per_mode[sample.mode]; });
    }
  }
};

}  // namespace

TEST_CASE("xen link: the legacy lifecycle through the fake matches the ground truth", "[xen][e2e]") {
  Host host(TestScenario("intel-arch-v4", 41));
  TempDir dir;
  auto link = ConnectThroughFake(host, XenRoot(dir));
  CHECK(link->platform_name() == "xen");
  CHECK(link->machine_name() == "Xen 4.17");

  legacy::Init init{};
  REQUIRE(Run(*link, legacy::kOpInit, &init) == hvpmu::ErrorCode::kOk);
  CHECK(init.is_primary == 1);
  CHECK(std::string(init.cpu_type) == "i386/arch_perfmon");
  legacy::GetBuffer own{};
  own.max_samples = 2048;
  REQUIRE(Run(*link, legacy::kOpGetBuffer, &own) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpResetActiveList) == hvpmu::ErrorCode::kOk);
  legacy::DomainIdArg self = 0;
  REQUIRE(Run(*link, legacy::kOpSetActive, &self) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpResetPassiveList) == hvpmu::ErrorCode::kOk);
  legacy::Passive passive{};
  passive.domain_id = 2;
  passive.max_samples = 2048;
  REQUIRE(Run(*link, legacy::kOpSetPassive, &passive) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpReserveCounters) == hvpmu::ErrorCode::kOk);
  legacy::Counter counter{};
  counter.ind = 0;
  counter.count = 100000;
  counter.enabled = 1;
  counter.event = 0x3C;
  counter.kernel = 1;
  counter.user = 1;
  REQUIRE(Run(*link, legacy::kOpCounter, &counter) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpSetupEvents) == hvpmu::ErrorCode::kOk);

  // start before enable_virq: refused, as Xen refuses it.
  CHECK(Run(*link, legacy::kOpStart) != hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpEnableVirq) == hvpmu::ErrorCode::kOk);
  // A second enable_virq: the engine refuses it (EALREADY). Real Xen 4.17 answers 0 and counts
  // the domain ready twice (tests/qemu/xenoprof_probe_expected.h); the fake cannot copy that.
  CHECK(Run(*link, legacy::kOpEnableVirq) == hvpmu::ErrorCode::kAlreadyActivated);

  LegacyBuffer dom0(*link, own.buf_gmaddr, own.nbuf, own.bufsize);
  LegacyBuffer guest2(*link, passive.buf_gmaddr, passive.nbuf, passive.bufsize);
  // A new buffer while these are mapped: EBUSY, as in Xen.
  legacy::GetBuffer again{};
  again.max_samples = 2048;
  CHECK(Run(*link, legacy::kOpGetBuffer, &again) == hvpmu::ErrorCode::kBusy);
  auto virq = link->NotificationFds(own.buf_gmaddr, 0, static_cast<uint32_t>(own.nbuf));
  REQUIRE(virq.has_value());
  REQUIRE(virq.value().size() == 1);

  REQUIRE(Run(*link, legacy::kOpStart) == hvpmu::ErrorCode::kOk);
  (void)host.GroundTruth(true);
  auto clock = host.Connect(0);
  std::map<uint8_t, uint64_t> dom0_modes, guest2_modes;
  // 200 ms in 10 ms slices. dom0's rings are drained when VIRQ_XENOPROF fires (a ring is half
  // full) or, failing that, at three quarters, so the wake-up must come first.
  int wakes = 0, drains_without_wake = 0;
  for (int slice = 0; slice < 20; ++slice) {
    REQUIRE(clock->SimRunFor(10'000'000).has_value());
    pollfd wake{virq.value()[0].get(), POLLIN, 0};
    uint32_t fullest = 0;
    for (const auto& reader : dom0.readers) {
      const auto& header = reader.header();
      fullest = std::max(fullest, (header.event_head + reader.size() - header.event_tail) % reader.size());
    }
    // The notification crosses processes: on a loaded machine it may land a little after the
    // slice returns. A ring past half full must have been announced within a second.
    const bool woken = ::poll(&wake, 1, fullest > dom0.readers[0].size() / 2 ? 1000 : 0) == 1;
    if (woken) {
      ++wakes;
      uint64_t value;
      while (::read(virq.value()[0].get(), &value, sizeof value) == sizeof value) {
      }
      dom0.Drain(dom0_modes);
    } else if (fullest > dom0.readers[0].size() * 3 / 4) {
      ++drains_without_wake;
      dom0.Drain(dom0_modes);
    }
    guest2.Drain(guest2_modes);
  }
  REQUIRE(Run(*link, legacy::kOpStop) == hvpmu::ErrorCode::kOk);
  dom0.Drain(dom0_modes);
  guest2.Drain(guest2_modes);
  CHECK(wakes > 0);  // VIRQ_XENOPROF reached the eventfd
  CHECK(drains_without_wake == 0);

  const context::GroundTruth truth = host.GroundTruth(false);
  std::map<std::pair<uint16_t, Mode>, uint64_t> expected;
  for (const context::TruthRow& row : truth.rows) expected[{row.domain, row.mode}] += row.overflows.at(0);
  uint64_t lost = 0;
  for (const auto& reader : dom0.readers) lost += reader.header().lost_samples;
  for (const auto& reader : guest2.readers) lost += reader.header().lost_samples;
  CHECK(lost == 0);
  for (const Mode mode : {Mode::kUser, Mode::kKernel, Mode::kHypervisor}) {
    INFO("mode " << sample_mode::Name(mode));
    CHECK(expected[{0, mode}] > 0);
    CHECK(dom0_modes[sample_mode::Byte(mode)] == expected[{0, mode}]);
    CHECK(guest2_modes[sample_mode::Byte(mode)] == expected[{2, mode}]);
  }

  // Tear down in Xen's order; the mappings go first, then get_buffer works again.
  REQUIRE(Run(*link, legacy::kOpDisableVirq) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpReleaseCounters) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpResetPassiveList) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpResetActiveList) == hvpmu::ErrorCode::kOk);
  REQUIRE(Run(*link, legacy::kOpShutdown) == hvpmu::ErrorCode::kOk);
}

TEST_CASE("xen link: refusals say what is wrong and what to do", "[xen][refusal]") {
  SECTION("not a Xen machine") {
    TempDir dir;
    std::filesystem::create_directories(dir.File("kvm/sys/hypervisor"));
    std::ofstream(dir.File("kvm/sys/hypervisor/type")) << "kvm\n";
    const xen::XenHost host = xen::DetectXen(dir.File("kvm"));
    CHECK_FALSE(host.is_xen);
    CHECK(host.reason.find("'kvm', not xen") != std::string::npos);
    auto link = xen::ConnectXen(0, dir.File("kvm"));
    REQUIRE_FALSE(link.has_value());
    CHECK(link.error().message().find("--platform=linux") != std::string::npos);
    CHECK_FALSE(xen::DetectXen(dir.File("nothing")).is_xen);
  }
  SECTION("each errno of xenoprof has its advice") {
    const std::vector<std::pair<int, std::string>> cases = {
        {ENOSYS, "CONFIG_XENOPROF"}, {ENODEV, "AMD family 17h"}, {EBUSY, "vpmu=off"}, {EPERM, "primary"}};
    for (const auto& [errnum, advice] : cases) {
      const Error error = xen::XenoprofRefusal(legacy::kOpInit, errnum);
      INFO(error.message());
      CHECK(error.message().find("Xen refused init") != std::string::npos);
      CHECK(error.message().find(advice) != std::string::npos);
    }
    // The refusals an agent works around come back as codes, and each code names its errno
    // again; the others are errors with advice.
    for (int errnum : {EBUSY, EPERM, EEXIST, E2BIG, ENOMEM, EALREADY}) {
      const auto code = xen::ErrorCodeOfErrno(errnum);
      REQUIRE(code.has_value());
      CHECK(hvpmu::ErrorErrno(*code) == errnum);
    }
    for (int errnum : {ENOSYS, ENODEV, EINVAL}) CHECK_FALSE(xen::ErrorCodeOfErrno(errnum).has_value());
  }
}

TEST_CASE("xen link: a PV guest learns its id from xenstore and may run only the non-privileged ops",
          "[xen][refusal]") {
  Host host(TestScenario("intel-arch-v4", 42));
  TempDir dir;
  // dom0 sees every domain, by name, through xenstore.
  auto dom0 = ConnectThroughFake(host, XenRoot(dir));
  const std::vector<hvprof::context::DomainInfo> domains = dom0->Domains().value();
  REQUIRE(domains.size() == 4);
  CHECK(domains[1].name == "guest1");
  CHECK(domains[1].vcpus == 2);

  const std::string guest_root = dir.File("guest-root");
  std::filesystem::create_directories(guest_root + "/sys/hypervisor");
  std::filesystem::create_directories(guest_root + "/proc/xen");
  std::ofstream(guest_root + "/sys/hypervisor/type") << "xen\n";
  std::ofstream(guest_root + "/proc/xen/capabilities") << "";
  ::setenv("HVPROF_FAKE_XEN_DOMAIN", "1", 1);
  // A --domain that is not the guest's own is refused.
  auto wrong = xen::ConnectXen(3, guest_root);
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().message().find("Xen says this is domain 1") != std::string::npos);
  auto connected = xen::ConnectXen(std::nullopt, guest_root);
  REQUIRE(connected.has_value());
  auto& guest = *connected.value();
  CHECK(guest.domain() == 1);
  const std::vector<hvprof::context::DomainInfo> own = guest.Domains().value();
  REQUIRE(own.size() == 1);
  CHECK(own[0].id == 1);

  legacy::Init init{};
  REQUIRE(Run(guest, legacy::kOpInit, &init) == hvpmu::ErrorCode::kOk);
  CHECK(init.is_primary == 0);
  // Privileged ops: EPERM, explained as Xen's primary rule.
  for (uint32_t op : {legacy::kOpReserveCounters, legacy::kOpStart, legacy::kOpResetActiveList}) {
    const hvpmu::ErrorCode code = Run(guest, op);
    CHECK(code == hvpmu::ErrorCode::kBadState);
    const Error error = guest.DescribeRefusal(op, code);
    INFO(error.message());
    CHECK(error.message().find(std::string("Xen refused ") + agent::OpName(op) + " (Operation not permitted)") !=
          std::string::npos);
    CHECK(error.message().find("only the primary profiler") != std::string::npos);
  }
  // Above op 17 Xen's range check answers, not the engine.
  CHECK_FALSE(guest.Op(hvpmu::kOpStatus, {}).has_value());
  ::setenv("HVPROF_FAKE_XEN_DOMAIN", "0", 1);
}

// Xen's trace buffers through libxenctrl as the fake plays it (hvprof-hv's simulated ones): Xen's
// refusals, then the link's SchedSource reading the machine's scheduling through frames mapped
// one by one.
TEST_CASE("xen: the trace buffers keep Xen's refusals, and the link reads the machine's scheduling from them",
          "[xen][sched]") {
  Json scenario = TestScenario("intel-arch-v4", 23);
  const double loads[] = {0.6, 0.95, 0.4, 0.85};  // some pCPUs idle at times
  for (size_t d = 0; d < scenario["domains"].size(); ++d) scenario["domains"][d]["load"] = loads[d % 4];
  Host host(scenario);
  TempDir dir;
  auto link = ConnectThroughFake(host, XenRoot(dir));
  xc_interface* xch = xc_interface_open(nullptr, nullptr, 0);
  REQUIRE(xch != nullptr);
  // Enable before any size: EINVAL, as Xen says (libxenctrl's enable sets a size first: asked
  // of hvprof-hv directly); a guest may not ask at all.
  auto enable_first = host.Connect(0)->SimXenTrace(static_cast<uint32_t>(hv::XenTraceCommand::kEnable), 0);
  REQUIRE(enable_first.has_value());
  CHECK(enable_first.value().xen_errno == EINVAL);
  CHECK(enable_first.value().bytes == 0);
  CHECK_FALSE(host.Connect(1)->SimXenTrace(static_cast<uint32_t>(hv::XenTraceCommand::kGetInfo), 0).has_value());
  errno = 0;
  CHECK(xc_tbuf_set_evt_mask(xch, hvpmu::xentrace::kHvprofEventMask) == 0);
  unsigned long pages = 0;
  CHECK(xc_tbuf_get_size(xch, &pages) != 0);
  // The size is one-shot: the same again is EBUSY, another EINVAL.
  CHECK(xc_tbuf_set_size(xch, 4) == 0);
  CHECK(xc_tbuf_get_size(xch, &pages) == 0);
  CHECK(pages == 4);  // pages, not bytes
  CHECK(xc_tbuf_set_size(xch, 8) != 0);
  CHECK(errno == EINVAL);
  CHECK(xc_tbuf_set_size(xch, 4) != 0);
  CHECK(errno == EBUSY);
  unsigned long mfn = 0;
  unsigned long t_info_bytes = 0;
  CHECK(xc_tbuf_enable(xch, 64, &mfn, &t_info_bytes) == 0);  // the size asked for is ignored
  CHECK(t_info_bytes % 4096 == 0);
  CHECK(t_info_bytes > 0);
  // A frame Xen does not share is refused.
  auto memory = xenforeignmemory_open(nullptr, 0);
  xen_pfn_t stranger = 0x1;
  int error = 0;
  CHECK(xenforeignmemory_map(memory, hvpmu::xentrace::kDomidXen, PROT_READ, 1, &stranger, &error) == nullptr);
  CHECK(error == -EPERM);
  xenforeignmemory_close(memory);
  CHECK(xc_tbuf_disable(xch) == 0);
  xc_interface_close(xch);

  auto source = link->OpenSchedSource();
  INFO((source ? std::string() : source.error().message()));
  REQUIRE(source.has_value());
  REQUIRE(source.value()->Start().has_value());
  REQUIRE(source.value()->NotificationFd() >= 0);
  auto clock = host.Connect(0);
  std::map<std::pair<int, int>, uint64_t> runstates;
  uint64_t drained = 0;
  for (int step = 0; step < 300; ++step) {
    REQUIRE(clock->SimRunFor(1'000'000).has_value());
    // 4 pages a CPU fill in about 100 ms here: VIRQ_TBUF fires before that.
    pollfd fd{source.value()->NotificationFd(), POLLIN, 0};
    if (::poll(&fd, 1, 0) > 0 || step % 50 == 49) {
      source.value()->Drain([&](const hvpmu::ring::SchedRecord& record) {
        ++drained;
        if (record.type == static_cast<uint8_t>(hvpmu::ring::SchedType::kRunstate)) ++runstates[{record.domain, record.vcpu}];
      });
    }
  }
  REQUIRE(source.value()->Stop().has_value());
  source.value()->Drain([&](const hvpmu::ring::SchedRecord&) { ++drained; });
  const agent::SchedSourceStats stats = source.value()->stats();
  CHECK(stats.records == drained);
  CHECK(stats.platform_lost == 0);
  CHECK(stats.malformed == 0);
  CHECK(stats.inconsistent == 0);
  CHECK(drained > 1000);
  // Every vCPU of the machine and every pCPU's idle vCPU changed state.
  for (const auto& [domain, vcpus] : std::vector<std::pair<int, int>>{{0, 2}, {1, 2}, {2, 2}, {3, 1}, {0x7FFF, 4}}) {
    for (int vcpu = 0; vcpu < vcpus; ++vcpu) {
      INFO("domain " << domain << " vcpu " << vcpu);
      CHECK(runstates[{domain, vcpu}] > 0);
    }
  }
  CHECK(source.value()->notes().at(0).find("0x00029000") != std::string::npos);
}
