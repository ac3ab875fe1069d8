#pragma once

// USDT static probes (provider `hvprof`) at the points an operator watches in hvprofd and
// hvprof-hv: docs/probes.md lists every probe with its arguments, and tests/integration/probes_test.cpp
// checks that list against the ELF notes of the built daemons.
//
// A probe is a single `nop` in the code and an entry in the binary's `.note.stapsdt` section;
// a tracer (bpftrace, perf, SystemTap) turns the nop into a breakpoint when it attaches. Its
// arguments are values already in registers or memory: when no tracer is attached nothing is
// computed and nothing is called. Every probe has a semaphore, a counter the kernel raises while
// a tracer is attached, so an argument that costs something to make (a string built for the
// probe, a sum over rings) is made only then:
//
//   HVPROF_PROBE_SEMAPHORE(ring__drained);          // once, at global scope, in one .cpp
//   ...
//   if (HVPROF_PROBE_ENABLED(ring__drained)) {
//     HVPROF_PROBE(ring__drained, domain, index, samples, bytes, SumOfLost(ring));
//   }
//
// A probe used in a header declares its semaphore there with HVPROF_PROBE_SEMAPHORE_DECLARE and
// defines it in that library's .cpp. Names are `noun__verb` (`session__start`); arguments are
// integers or `const char*` that stay valid until the probe returns (a std::string's c_str(),
// never a std::string_view's data()). At most 12 arguments.
//
// Adding one: DEVELOPMENT.md (Probes).

// Semaphores in every probe: each probe's note names `hvprof_<name>_semaphore`.
// SDT_USE_VARIADIC: STAP_PROBEV, one macro for any number of arguments.
#define _SDT_HAS_SEMAPHORES 1
#define SDT_USE_VARIADIC 1
#include <sys/sdt.h>

// Defines the semaphore of probe `name` (at global scope, in exactly one .cpp of the binary).
#define HVPROF_PROBE_SEMAPHORE(name)                                                                   \
  extern "C" {                                                                                         \
  __attribute__((visibility("hidden"), section(".probes"), used)) volatile unsigned short              \
      hvprof_##name##_semaphore = 0;                                                                   \
  }                                                                                                    \
  static_assert(true)

// Declares the semaphore of probe `name` (at global scope) for a probe used in a header.
#define HVPROF_PROBE_SEMAPHORE_DECLARE(name)                                                           \
  extern "C" __attribute__((visibility("hidden"))) volatile unsigned short hvprof_##name##_semaphore

// True while a tracer is attached to probe `name`: guards arguments that cost something.
#define HVPROF_PROBE_ENABLED(name) __builtin_expect(hvprof_##name##_semaphore != 0, 0)

// Fires probe `name` of provider `hvprof` with up to 12 arguments.
#define HVPROF_PROBE(name, ...) STAP_PROBEV(hvprof, name, __VA_ARGS__)
