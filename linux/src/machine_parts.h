// What the files that implement LinuxMachine share (private to linux/):
//   linux_machine.cpp   the machine: its domains, perf set up on every CPU, the drain thread's
//                       wait and wake, the images and domains it tells agents of;
//   linux_platform.cpp  LinuxPlatform, this host as the engine's platform;
//   linux_records.cpp   perf's records drained, merged in time order across CPUs, and applied;
//   linux_sched.cpp     the scheduler's tracepoints as the engine's scheduling records;
//   linux_stats.cpp     what the platform says of its sampling (PlatformStats), and its notes.
#pragma once

#include "hvprof/linux/linux_machine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <dirent.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/probes.h"
#include "hvpmu/pmu_drivers.h"

namespace hvprof::linux_host {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::DomainType;
using hvpmu::PmuDriver;
using hvpmu::PmuDrivers;
using hvpmu::kDomainInvalid;
using hvpmu::kMaxCpus;
using hvpmu::kMaxVcpus;
namespace ring = hvpmu::ring;

using hvprof::ErrorKind;
using hvprof::MakeError;
using Json = nlohmann::json;

}  // namespace hvprof::linux_host
