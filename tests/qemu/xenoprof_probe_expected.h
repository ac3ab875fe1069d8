// What Xen 4.17.7 answered xenoprof_probe (xenoprof_probe.cpp) in dom0 under QEMU (qemu64: Xen says
// x86-64/hammer; dom0 with 2 vCPUs), scenario by scenario, line by line. xenoprof_probe_test.cpp
// asserts them on the real hypervisor, xenoprof_probe_fake_test.cpp on the fake Xen. The reasons
// are in Xen's xen/common/xenoprof.c (4.17.0 to 4.17.7 do not differ there); see each scenario.
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace hvprof::testing::xenoprof_probe {

// An output's lines, without empty ones.
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// The dom0 agent's unwind (dom0-agent/src/agent.cpp UnwindXenoprof) on a profiler nobody used
// since boot: the privileged ops are refused (no primary yet), and disable_virq too: dom0 has no
// xenoprof buffer (d->xenoprof is NULL until its first get_buffer), whatever the list says.
inline constexpr const char* kRecoveryFresh = R"(scenario recovery-fresh
stop: -1 EPERM
release_counters: -1 EPERM
shutdown: -1 EPERM
init: 0 OK primary=1 events=4 cpu=x86-64/hammer
set_active(0): 0 OK
disable_virq: -1 EPERM
reset_passive_list: 0 OK
reset_active_list: 0 OK
shutdown: 0 OK
)";

// disable_virq takes the caller off the active list (reset_active: its slot is cleared,
// `activated` drops, and when it reaches 0 the whole list is forgotten, adomains = 0):
// - a second disable_virq and enable_virq are refused (EPERM: not on the list);
// - start succeeds again with nobody on the list (activated 0 == adomains 0);
// - counter is refused (EPERM) while the list is empty, whatever the state;
// - set_active(0) is refused in READY (EPERM: only in INITIALIZED), accepted after
//   release_counters.
// disable_virq is refused while profiling for a domain that called enable_virq.
inline constexpr const char* kDisableVirqActive = R"(scenario disable-virq-active
init: 0 OK primary=1 events=4 cpu=x86-64/hammer
get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
map: 0 OK pages=1
set_active(0): 0 OK
reserve_counters: 0 OK
counter(0): 0 OK
setup_events: 0 OK
enable_virq: 0 OK
start: 0 OK
disable_virq@profiling: -1 EPERM
stop: 0 OK
disable_virq: 0 OK
disable_virq@again: -1 EPERM
enable_virq@again: -1 EPERM
start@again: 0 OK
stop@again: 0 OK
set_active(0)@ready: -1 EPERM
release_counters: 0 OK
reserve_counters: 0 OK
counter(0): -1 EPERM
release_counters: 0 OK
set_active(0)@initialized: 0 OK
reset_active_list: 0 OK
shutdown: 0 OK
unmap: 0 OK
)";

// A duplicate set_active is accepted (add_active_list appends, duplicates included), and
// start is then refused for good (EPERM: activated 1 != adomains 2). dom0's disable_virq clears
// its first entry and, with activated back at 0, forgets the list, duplicate included.
inline constexpr const char* kDuplicateSetActive = R"(scenario duplicate-set-active
init: 0 OK primary=1 events=4 cpu=x86-64/hammer
get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
map: 0 OK pages=1
set_active(0): 0 OK
set_active(0)@duplicate: 0 OK
reserve_counters: 0 OK
counter(0): 0 OK
setup_events: 0 OK
enable_virq: 0 OK
start: -1 EPERM
disable_virq: 0 OK
disable_virq@again: -1 EPERM
release_counters: 0 OK
reset_active_list: 0 OK
shutdown: 0 OK
unmap: 0 OK
)";

// A domain has one buffer from its first get_buffer until it dies: later get_buffers share
// the same pages with the size of the first (max_samples is ignored), in this process or
// another. get_buffer is refused (EBUSY) while the pages are still shared, mapped or not: only
// disable_virq unshares them. get_buffer and enable_virq zero head and tail; nothing zeroes
// the sample and loss counters (the probe's own values, written after the first get_buffer,
// survive two more get_buffers and an enable_virq).
inline constexpr const char* kCountersAcrossBuffers = R"(scenario counters-across-buffers
init: 0 OK primary=1 events=4 cpu=x86-64/hammer
get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
map: 0 OK pages=1
ring0: head=0 tail=0 size=64 vcpu=0 xen=0 kernel=0 user=0 lost=0
ring1: head=0 tail=0 size=64 vcpu=1 xen=0 kernel=0 user=0 lost=0
write: head=5 tail=3 xen=10N+101 kernel=10N+102 user=10N+103 lost=10N+104 in every ringN
get_buffer@mapped: -16 EBUSY
unmap: 0 OK
get_buffer@shared: -16 EBUSY
map: 0 OK pages=1
ring0: head=5 tail=3 size=64 vcpu=0 xen=101 kernel=102 user=103 lost=104
ring1: head=5 tail=3 size=64 vcpu=1 xen=111 kernel=112 user=113 lost=114
set_active(0): 0 OK
reserve_counters: 0 OK
counter(0): 0 OK
setup_events: 0 OK
enable_virq: 0 OK
ring0: head=0 tail=0 size=64 vcpu=0 xen=101 kernel=102 user=103 lost=104
ring1: head=0 tail=0 size=64 vcpu=1 xen=111 kernel=112 user=113 lost=114
write: head=5 tail=3 xen=10N+101 kernel=10N+102 user=10N+103 lost=10N+104 in every ringN
release_counters: 0 OK
disable_virq: 0 OK
ring0: head=5 tail=3 size=64 vcpu=0 xen=101 kernel=102 user=103 lost=104
ring1: head=5 tail=3 size=64 vcpu=1 xen=111 kernel=112 user=113 lost=114
unmap: 0 OK
shutdown: 0 OK
init: 0 OK primary=1 events=4 cpu=x86-64/hammer
get_buffer: 0 OK max_samples=16 nbuf=2 bufsize=1072 same-buffer=yes
map: 0 OK pages=1
ring0: head=0 tail=0 size=64 vcpu=0 xen=101 kernel=102 user=103 lost=104
ring1: head=0 tail=0 size=64 vcpu=1 xen=111 kernel=112 user=113 lost=114
write: head=7 tail=6 xen=10N+101 kernel=10N+102 user=10N+103 lost=10N+104 in every ringN
set_active(0): 0 OK
disable_virq: 0 OK
unmap: 0 OK
reset_active_list: 0 OK
shutdown: 0 OK
[new-process] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[new-process] get_buffer: 0 OK max_samples=8 nbuf=2 bufsize=1072 same-buffer=yes
[new-process] map: 0 OK pages=1
[new-process] ring0: head=0 tail=0 size=64 vcpu=0 xen=101 kernel=102 user=103 lost=104
[new-process] ring1: head=0 tail=0 size=64 vcpu=1 xen=111 kernel=112 user=113 lost=114
[new-process] set_active(0): 0 OK
[new-process] disable_virq: 0 OK
[new-process] unmap: 0 OK
[new-process] reset_active_list: 0 OK
[new-process] shutdown: 0 OK
[new-process] ended: exit 0
)";

// The dom0 agent's unwind after a process was killed at three points. A killed process
// leaves its buffer shared (its mapping goes with it; the sharing does not) and, after init,
// dom0 the primary. Each unwind step answers as listed: shutdown succeeds whenever a primary
// was left (state INITIALIZED after stop and release_counters); set_active(0) then puts dom0
// back on the list that shutdown emptied, so that disable_virq can unshare the buffer and the
// next get_buffer works. Without that set_active(0), disable_virq is refused (EPERM: dom0 is
// on no list after shutdown) and get_buffer stays refused (EBUSY); the full unwind still
// recovers from there (its first shutdown is refused: no primary is left).
inline constexpr const char* kRecovery = R"(scenario recovery
[killed-after-init] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[killed-after-init] get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
[killed-after-init] map: 0 OK pages=1
[killed-after-init] ended: killed by signal 9
[unwind] stop: -1 EPERM
[unwind] release_counters: -1 EPERM
[unwind] shutdown: 0 OK
[unwind] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[unwind] set_active(0): 0 OK
[unwind] disable_virq: 0 OK
[unwind] reset_passive_list: 0 OK
[unwind] reset_active_list: 0 OK
[unwind] shutdown: 0 OK
[unwind] ended: exit 0
[after] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[after] get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
[after] map: 0 OK pages=1
[after] set_active(0): 0 OK
[after] disable_virq: 0 OK
[after] unmap: 0 OK
[after] reset_active_list: 0 OK
[after] shutdown: 0 OK
[after] ended: exit 0
[killed-after-reserve] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[killed-after-reserve] get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
[killed-after-reserve] map: 0 OK pages=1
[killed-after-reserve] reset_active_list: 0 OK
[killed-after-reserve] set_active(0): 0 OK
[killed-after-reserve] reset_passive_list: 0 OK
[killed-after-reserve] reserve_counters: 0 OK
[killed-after-reserve] counter(0): 0 OK
[killed-after-reserve] ended: killed by signal 9
[unwind] stop: -1 EPERM
[unwind] release_counters: 0 OK
[unwind] shutdown: 0 OK
[unwind] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[unwind] set_active(0): 0 OK
[unwind] disable_virq: 0 OK
[unwind] reset_passive_list: 0 OK
[unwind] reset_active_list: 0 OK
[unwind] shutdown: 0 OK
[unwind] ended: exit 0
[after] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[after] get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
[after] map: 0 OK pages=1
[after] set_active(0): 0 OK
[after] disable_virq: 0 OK
[after] unmap: 0 OK
[after] reset_active_list: 0 OK
[after] shutdown: 0 OK
[after] ended: exit 0
[killed-while-profiling] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[killed-while-profiling] get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
[killed-while-profiling] map: 0 OK pages=1
[killed-while-profiling] reset_active_list: 0 OK
[killed-while-profiling] set_active(0): 0 OK
[killed-while-profiling] reset_passive_list: 0 OK
[killed-while-profiling] reserve_counters: 0 OK
[killed-while-profiling] counter(0): 0 OK
[killed-while-profiling] setup_events: 0 OK
[killed-while-profiling] enable_virq: 0 OK
[killed-while-profiling] start: 0 OK
[killed-while-profiling] ended: killed by signal 9
[unwind-without-set-active] stop: 0 OK
[unwind-without-set-active] release_counters: 0 OK
[unwind-without-set-active] shutdown: 0 OK
[unwind-without-set-active] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[unwind-without-set-active] disable_virq: -1 EPERM
[unwind-without-set-active] reset_passive_list: 0 OK
[unwind-without-set-active] reset_active_list: 0 OK
[unwind-without-set-active] shutdown: 0 OK
[unwind-without-set-active] ended: exit 0
[still-shared] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[still-shared] get_buffer: -16 EBUSY
[still-shared] shutdown: 0 OK
[still-shared] ended: exit 0
[unwind] stop: -1 EPERM
[unwind] release_counters: -1 EPERM
[unwind] shutdown: -1 EPERM
[unwind] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[unwind] set_active(0): 0 OK
[unwind] disable_virq: 0 OK
[unwind] reset_passive_list: 0 OK
[unwind] reset_active_list: 0 OK
[unwind] shutdown: 0 OK
[unwind] ended: exit 0
[after] init: 0 OK primary=1 events=4 cpu=x86-64/hammer
[after] get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
[after] map: 0 OK pages=1
[after] set_active(0): 0 OK
[after] disable_virq: 0 OK
[after] unmap: 0 OK
[after] reset_active_list: 0 OK
[after] shutdown: 0 OK
[after] ended: exit 0
)";

// A second enable_virq is accepted and counted twice (set_active: activated++), so start is
// refused (EPERM: activated 2 != adomains 1). disable_virq clears dom0's entry but leaves
// activated at 1 with adomains 1: start then succeeds with nobody on the list, and dom0's next
// disable_virq is refused (EPERM: its entry is gone).
inline constexpr const char* kDuplicateEnableVirq = R"(scenario duplicate-enable-virq
init: 0 OK primary=1 events=4 cpu=x86-64/hammer
get_buffer: 0 OK max_samples=64 nbuf=2 bufsize=1072
map: 0 OK pages=1
set_active(0): 0 OK
reserve_counters: 0 OK
counter(0): 0 OK
setup_events: 0 OK
enable_virq: 0 OK
enable_virq@again: 0 OK
start: -1 EPERM
disable_virq: 0 OK
start@after-disable: 0 OK
stop: 0 OK
disable_virq@again: -1 EPERM
release_counters: 0 OK
reset_active_list: 0 OK
shutdown: 0 OK
unmap: 0 OK
)";

// The scenarios, in the order one boot runs them: each leaves xenoprof as it found it (no
// primary, dom0's buffer unshared), which the next one's answers show.
inline const std::vector<std::pair<std::string, const char*>>& Scenarios() {
  static const std::vector<std::pair<std::string, const char*>> scenarios = {
      {"recovery-fresh", kRecoveryFresh},
      {"disable-virq-active", kDisableVirqActive},
      {"duplicate-set-active", kDuplicateSetActive},
      {"counters-across-buffers", kCountersAcrossBuffers},
      {"recovery", kRecovery},
      {"duplicate-enable-virq", kDuplicateEnableVirq},
  };
  return scenarios;
}

}  // namespace hvprof::testing::xenoprof_probe
