// The few functions of libxenctrl (Xen 4.17's xenctrl.h) the xen link calls for Xen's trace
// buffers, declared here because xenctrl.h cannot be compiled as C++ (its public headers use
// anonymous structs and GCC-only alignment). The fake Xen (tests/xen-fake) defines them.
// Quirks of libxenctrl 4.17 (tools/libs/ctrl/xc_tbuf.c):
// - xc_tbuf_enable first sets the size and ignores the answer (the size is one-shot: Xen's boot
//   option tbuf_size= or the first set_size; buffers are never freed), then enables, then returns
//   *mfn = t_info's first frame and *size = t_info's size in BYTES (t_info_pages * 4096), not a
//   buffer size, whatever its comment says.
// - Allocating the buffers starts tracing at once with the mask as it stands (TRC_ALL at boot):
//   set the event mask first.
// - xc_tbuf_get_size answers PAGES per CPU (t_info's tbuf_size), not bytes.
// - xc_cpumap_alloc's map is freed with free(); xc_get_cpumap_size is its size in bytes.
#pragma once

#include <cstdint>

extern "C" {
#include <xentoollog.h>

typedef struct xc_interface_core xc_interface;
typedef uint8_t* xc_cpumap_t;

// struct xen_sysctl_physinfo (xen/include/public/sysctl.h, interface version 0x15): the fields
// the link reads, at Xen's offsets.
struct HvprofXenPhysinfo {
  uint32_t threads_per_core;
  uint32_t cores_per_socket;
  uint32_t nr_cpus;     // CPUs online
  uint32_t max_cpu_id;  // the largest possible CPU id
  uint32_t nr_nodes;
  uint32_t max_node_id;
  uint32_t cpu_khz;     // the TSC's rate
  uint32_t capabilities;
  uint32_t arch_capabilities;
  uint32_t pad;
  uint64_t total_pages;
  uint64_t free_pages;
  uint64_t scrub_pages;
  uint64_t outstanding_pages;
  uint64_t max_mfn;
  uint32_t hw_cap[8];
};
static_assert(sizeof(HvprofXenPhysinfo) == 112);

xc_interface* xc_interface_open(xentoollog_logger* logger, xentoollog_logger* dombuild_logger, unsigned open_flags);
int xc_interface_close(xc_interface* xch);
int xc_physinfo(xc_interface* xch, HvprofXenPhysinfo* info);
int xc_get_cpumap_size(xc_interface* xch);
xc_cpumap_t xc_cpumap_alloc(xc_interface* xch);
int xc_tbuf_enable(xc_interface* xch, unsigned long pages, unsigned long* mfn, unsigned long* size);
int xc_tbuf_disable(xc_interface* xch);
int xc_tbuf_set_size(xc_interface* xch, unsigned long size);
int xc_tbuf_get_size(xc_interface* xch, unsigned long* size);
int xc_tbuf_set_cpu_mask(xc_interface* xch, xc_cpumap_t mask);
int xc_tbuf_set_evt_mask(xc_interface* xch, uint32_t mask);
}
