// The legacy layouts must match Xen's own header byte for byte.
#include <cstddef>
#include <cstdint>

extern "C" {
#include <xen/xen.h>
#include <xen/xenoprof.h>
}

#include <catch2/catch.hpp>

#include "hvpmu/abi/xenoprof_legacy.h"

namespace legacy = hvpmu::legacy;

#define SAME_FIELD(ours, theirs, field) \
  CHECK(offsetof(ours, field) == offsetof(theirs, field)); \
  CHECK(sizeof(static_cast<ours*>(nullptr)->field) == sizeof(static_cast<theirs*>(nullptr)->field))

TEST_CASE("legacy op numbers and constants match xen/xenoprof.h", "[abi]") {
  CHECK(legacy::kOpInit == XENOPROF_init);
  CHECK(legacy::kOpResetActiveList == XENOPROF_reset_active_list);
  CHECK(legacy::kOpResetPassiveList == XENOPROF_reset_passive_list);
  CHECK(legacy::kOpSetActive == XENOPROF_set_active);
  CHECK(legacy::kOpSetPassive == XENOPROF_set_passive);
  CHECK(legacy::kOpReserveCounters == XENOPROF_reserve_counters);
  CHECK(legacy::kOpCounter == XENOPROF_counter);
  CHECK(legacy::kOpSetupEvents == XENOPROF_setup_events);
  CHECK(legacy::kOpEnableVirq == XENOPROF_enable_virq);
  CHECK(legacy::kOpStart == XENOPROF_start);
  CHECK(legacy::kOpStop == XENOPROF_stop);
  CHECK(legacy::kOpDisableVirq == XENOPROF_disable_virq);
  CHECK(legacy::kOpReleaseCounters == XENOPROF_release_counters);
  CHECK(legacy::kOpShutdown == XENOPROF_shutdown);
  CHECK(legacy::kOpGetBuffer == XENOPROF_get_buffer);
  CHECK(legacy::kOpSetBacktrace == XENOPROF_set_backtrace);
  CHECK(legacy::kOpGetIbsCaps == XENOPROF_get_ibs_caps);
  CHECK(legacy::kOpIbsCounter == XENOPROF_ibs_counter);
  CHECK(legacy::kOpLast == XENOPROF_last_op);
  CHECK(legacy::kMaxOprofEvents == MAX_OPROF_EVENTS);
  CHECK(legacy::kMaxOprofDomains == MAX_OPROF_DOMAINS);
  CHECK(legacy::kCpuTypeSize == XENOPROF_CPU_TYPE_SIZE);
  CHECK(legacy::kEscapeCode == XENOPROF_ESCAPE_CODE);
  CHECK(legacy::kTraceBegin == XENOPROF_TRACE_BEGIN);
  CHECK(legacy::kHypercallXenoprofOp == __HYPERVISOR_xenoprof_op);
  CHECK(legacy::kVirqXenoprof == VIRQ_XENOPROF);
}

TEST_CASE("event_log and xenoprof_buf layouts match", "[abi]") {
  CHECK(sizeof(legacy::EventLog) == sizeof(struct event_log));
  CHECK(alignof(legacy::EventLog) == alignof(struct event_log));
  SAME_FIELD(legacy::EventLog, event_log, eip);
  SAME_FIELD(legacy::EventLog, event_log, mode);
  SAME_FIELD(legacy::EventLog, event_log, event);

  CHECK(sizeof(legacy::XenoprofBuf) == sizeof(struct xenoprof_buf));
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, event_head);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, event_tail);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, event_size);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, vcpu_id);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, xen_samples);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, kernel_samples);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, user_samples);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, lost_samples);
  SAME_FIELD(legacy::XenoprofBuf, xenoprof_buf, event_log);
  CHECK(legacy::kBufHeaderSize == offsetof(struct xenoprof_buf, event_log));
}

TEST_CASE("operation argument layouts match", "[abi]") {
  CHECK(sizeof(legacy::Init) == sizeof(struct xenoprof_init));
  SAME_FIELD(legacy::Init, xenoprof_init, num_events);
  SAME_FIELD(legacy::Init, xenoprof_init, is_primary);
  SAME_FIELD(legacy::Init, xenoprof_init, cpu_type);

  CHECK(sizeof(legacy::GetBuffer) == sizeof(struct xenoprof_get_buffer));
  SAME_FIELD(legacy::GetBuffer, xenoprof_get_buffer, max_samples);
  SAME_FIELD(legacy::GetBuffer, xenoprof_get_buffer, nbuf);
  SAME_FIELD(legacy::GetBuffer, xenoprof_get_buffer, bufsize);
  SAME_FIELD(legacy::GetBuffer, xenoprof_get_buffer, buf_gmaddr);

  CHECK(sizeof(legacy::Counter) == sizeof(struct xenoprof_counter));
  SAME_FIELD(legacy::Counter, xenoprof_counter, ind);
  SAME_FIELD(legacy::Counter, xenoprof_counter, count);
  SAME_FIELD(legacy::Counter, xenoprof_counter, enabled);
  SAME_FIELD(legacy::Counter, xenoprof_counter, event);
  SAME_FIELD(legacy::Counter, xenoprof_counter, hypervisor);
  SAME_FIELD(legacy::Counter, xenoprof_counter, kernel);
  SAME_FIELD(legacy::Counter, xenoprof_counter, user);
  SAME_FIELD(legacy::Counter, xenoprof_counter, unit_mask);

  CHECK(sizeof(legacy::Passive) == sizeof(xenoprof_passive_t));
  SAME_FIELD(legacy::Passive, xenoprof_passive_t, domain_id);
  SAME_FIELD(legacy::Passive, xenoprof_passive_t, max_samples);
  SAME_FIELD(legacy::Passive, xenoprof_passive_t, nbuf);
  SAME_FIELD(legacy::Passive, xenoprof_passive_t, bufsize);
  SAME_FIELD(legacy::Passive, xenoprof_passive_t, buf_gmaddr);

  CHECK(sizeof(legacy::IbsCounter) == sizeof(struct xenoprof_ibs_counter));
  SAME_FIELD(legacy::IbsCounter, xenoprof_ibs_counter, op_enabled);
  SAME_FIELD(legacy::IbsCounter, xenoprof_ibs_counter, fetch_enabled);
  SAME_FIELD(legacy::IbsCounter, xenoprof_ibs_counter, max_cnt_fetch);
  SAME_FIELD(legacy::IbsCounter, xenoprof_ibs_counter, max_cnt_op);
  SAME_FIELD(legacy::IbsCounter, xenoprof_ibs_counter, rand_en);
  SAME_FIELD(legacy::IbsCounter, xenoprof_ibs_counter, dispatched_ops);

  CHECK(sizeof(legacy::DomainIdArg) == sizeof(domid_t));
  CHECK(sizeof(legacy::BacktraceDepthArg) == sizeof(unsigned long));
}

TEST_CASE("legacy buffer sizing follows Xen's alloc_xenoprof_struct", "[abi]") {
  // Xen sizes a ring as the header plus (max_samples - 1) records, clamps max_samples so a
  // domain's rings fit in 32 pages, and rounds the total up to whole pages.
  auto expect = [](uint32_t nvcpu, int32_t requested) {
    const uint32_t entry = sizeof(struct event_log);
    const uint32_t header = sizeof(struct xenoprof_buf);
    const uint32_t max_samples = ((32 * 4096) / nvcpu - header) / entry + 1;
    const uint32_t samples = static_cast<uint32_t>(requested) > max_samples
                                 ? max_samples
                                 : static_cast<uint32_t>(requested);
    const uint32_t bufsize = header + (samples - 1) * entry;
    return legacy::LegacyBufferLayout{static_cast<int32_t>(samples), static_cast<int32_t>(bufsize),
                                      (nvcpu * bufsize + 4095) / 4096};
  };
  for (uint32_t nvcpu : {1u, 2u, 4u, 8u, 32u, 128u}) {
    for (int32_t requested : {2, 16, 2048, 100000, -1}) {
      INFO("nvcpu " << nvcpu << " requested " << requested);
      const auto layout = legacy::ComputeLegacyBufferLayout(nvcpu, requested);
      const auto want = expect(nvcpu, requested);
      CHECK(layout.max_samples == want.max_samples);
      CHECK(layout.bufsize == want.bufsize);
      CHECK(layout.npages == want.npages);
      CHECK(layout.npages <= legacy::kMaxSharedPages);
    }
  }
  // Two rows of the table in the reference, as a cross-check of the formula above.
  CHECK(legacy::ComputeLegacyBufferLayout(1, 2048).npages == 9);
  CHECK(legacy::ComputeLegacyBufferLayout(4, 2048).max_samples == 2045);
}
