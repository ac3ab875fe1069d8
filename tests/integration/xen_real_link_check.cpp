// Linked against the real Xen libraries: connects where this is Xen, and otherwise checks
// that the refusal names the reason and the way out. Exit 0 pass, 1 fail, 77 skip (Xen host
// without permission).
#include <cstdio>

#include "hvprof/xen/xen_link.h"

int main() {
  const hvprof::xen::XenHost host = hvprof::xen::DetectXen();
  auto link = hvprof::xen::ConnectXen(0);
  if (!host.is_xen) {
    if (link) return std::puts("ConnectXen accepted a machine that is not Xen"), 1;
    const std::string message = link.error().message();
    std::printf("not Xen, refused: %s\n", message.c_str());
    return message.find("--platform=linux") != std::string::npos ? 0 : 1;
  }
  if (!link) return std::printf("skipped: on Xen, but %s\n", link.error().message().c_str()), 77;
  std::printf("connected to %s\n", link.value()->machine_name().c_str());
  return 0;
}
