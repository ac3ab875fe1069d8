// --domain-map: what it accepts, what it refuses and how it says so, and the domain registry.
#include <string>

#include <catch2/catch.hpp>

#include "hvprof/linux/domain_map.h"

using namespace hvprof::linux_host;
using hvpmu::DomainId;

namespace {

std::string ErrorOf(std::string_view text) {
  auto map = ParseDomainMap(text);
  REQUIRE_FALSE(map.has_value());
  return map.error().message();
}

}  // namespace

TEST_CASE("good domain maps", "[linux][domain-map]") {
  auto empty = ParseDomainMap("");
  REQUIRE(empty.has_value());
  CHECK(empty.value().empty());

  auto map = ParseDomainMap("pid:1234=1, cgroup:/machine.slice//vm.scope/=2,kvm:4321=3,pid:99=1");
  REQUIRE(map.has_value());
  const DomainMap& m = map.value();
  REQUIRE(m.entries.size() == 4);
  CHECK(m.entries[0].kind == DomainMapEntry::Kind::kPid);
  CHECK(m.entries[0].pid == 1234);
  CHECK(m.entries[1].cgroup == "/machine.slice/vm.scope");
  CHECK(m.entries[2].kind == DomainMapEntry::Kind::kKvm);
  CHECK(m.PidRule(1234) == DomainId{1});
  CHECK(m.PidRule(99) == DomainId{1});  // two trees may share a domain
  CHECK_FALSE(m.PidRule(1235).has_value());
  CHECK(m.KvmRule(4321) == DomainId{3});
  CHECK(m.MaxDomain() == 3);

  // Cgroup rules match the cgroup and what is below it, on path components only.
  CHECK(m.CgroupRule("/machine.slice/vm.scope") == DomainId{2});
  CHECK(m.CgroupRule("/machine.slice/vm.scope/vcpu0") == DomainId{2});
  CHECK_FALSE(m.CgroupRule("/machine.slice/vm.scope2").has_value());
  CHECK_FALSE(m.CgroupRule("/machine.slice").has_value());

  // The longest rule wins.
  auto nested = ParseDomainMap("cgroup:/a=1,cgroup:/a/b=2");
  REQUIRE(nested.has_value());
  CHECK(nested.value().CgroupRule("/a/b/c") == DomainId{2});
  CHECK(nested.value().CgroupRule("/a/x") == DomainId{1});
}

TEST_CASE("bad domain maps say what is wrong", "[linux][domain-map]") {
  CHECK(ErrorOf("pid:1=1,,pid:2=2") ==
        "--domain-map: entry 2 is empty; use pid:PID=DOMAIN, cgroup:/PATH=DOMAIN or "
        "kvm:PID=DOMAIN, separated by commas");
  CHECK(ErrorOf("pid1234=1") ==
        "--domain-map: 'pid1234=1' is not KIND:TARGET=DOMAIN; use pid:PID=DOMAIN, "
        "cgroup:/PATH=DOMAIN or kvm:PID=DOMAIN, separated by commas");
  CHECK(ErrorOf("pid:1234") .find("is not KIND:TARGET=DOMAIN") != std::string::npos);
  CHECK(ErrorOf("uid:1000=1") ==
        "--domain-map: 'uid:1000=1': unknown kind 'uid'; use pid:PID=DOMAIN, "
        "cgroup:/PATH=DOMAIN or kvm:PID=DOMAIN, separated by commas");
  CHECK(ErrorOf("pid:abc=1") ==
        "--domain-map: 'pid:abc=1': 'abc' is not a process id (a positive decimal number)");
  CHECK(ErrorOf("pid:0=1").find("'0' is not a process id") != std::string::npos);
  CHECK(ErrorOf("pid:-5=1").find("'-5' is not a process id") != std::string::npos);
  CHECK(ErrorOf("pid:99999999999=1").find("is not a process id") != std::string::npos);
  CHECK(ErrorOf("pid:12=x") == "--domain-map: 'pid:12=x': 'x' is not a domain id (0 to 32751)");
  CHECK(ErrorOf("pid:12=40000").find("'40000' is not a domain id") != std::string::npos);
  CHECK(ErrorOf("cgroup:machine.slice=1") ==
        "--domain-map: 'cgroup:machine.slice=1': the cgroup must be an absolute path such as "
        "/machine.slice/vm.scope");
  CHECK(ErrorOf("kvm:77=0") ==
        "--domain-map: 'kvm:77=0': domain 0 is the host; give the guest its own id");
  CHECK(ErrorOf("pid:5=1,pid:5=2") ==
        "--domain-map: 'pid:5=1' and 'pid:5=2' map the same process twice");
  CHECK(ErrorOf("cgroup:/a=1,cgroup:/a/=2") ==
        "--domain-map: 'cgroup:/a=1' and 'cgroup:/a/=2' map the same cgroup twice");
  CHECK(ErrorOf("pid:5=1,kvm:6=1") ==
        "--domain-map: 'pid:5=1' and 'kvm:6=1' both use domain 1; a KVM guest needs a domain of "
        "its own");
  CHECK(ErrorOf("kvm:6=2,kvm:7=2").find("both use domain 2") != std::string::npos);
}

TEST_CASE("the registry lists the map's domains and numbers VMMs", "[linux][domain-map]") {
  auto map = ParseDomainMap("pid:100=1,cgroup:/vms/a=3,kvm:300=5");
  REQUIRE(map.has_value());
  DomainRegistry registry(map.value(), 4, true);
  REQUIRE(registry.domains().size() == 4);
  CHECK(registry.domains()[0].name == "Domain-0");
  CHECK(registry.Find(1)->name == "pid-100");
  CHECK(registry.Find(3)->name == "cgroup-a");
  CHECK(registry.Find(5)->guest);
  CHECK(registry.Find(5)->vmm_pid == 300);
  CHECK(registry.Find(1)->vcpus == 4);

  CHECK(registry.GuestDomainFor(300, true) == 5);
  // A VMM without an entry gets the next id after the map's largest, once.
  CHECK(registry.GuestDomainFor(400, false) == hvpmu::kDomainInvalid);
  CHECK(registry.GuestDomainFor(400, true) == 6);
  CHECK(registry.GuestDomainFor(400, true) == 6);
  CHECK(registry.GuestDomainFor(401, true) == 7);
  CHECK(registry.Find(6)->automatic);
  registry.NoteGuestVcpus(6, 8);
  CHECK(registry.Find(6)->vcpus == 8);
  registry.NameGuest(6, "qemu-system-x86");
  CHECK(registry.Find(6)->name == "kvm-qemu-system-x86-400");

  DomainRegistry manual(map.value(), 4, false);
  CHECK(manual.GuestDomainFor(400, true) == hvpmu::kDomainInvalid);
}
