// What a simulated machine knows it did, exactly: every counter's events and overflows per
// domain, vCPU, mode, image and function, and the time every vCPU spent in each runstate. The sim
// makes it (SimMachine::GroundTruth); hvprof-hv's GroundTruth reply carries it to dom0 and
// `hvprof-hv --ground-truth=FILE` writes it; the end-to-end tests and benchmarks compare what
// hvprof measured with it. One record, one JSON codec, for all of them (the format is in
// docs/sim-scenarios.md, "Determinism and ground truth").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"
#include "hvprof/base/result.h"
#include "hvprof/facts/sample.h"

namespace hvprof::context {

// One logical counter as the machine counted it.
struct TruthCounter {
  uint32_t index = 0;
  bool enabled = false;
  uint32_t event = 0;      // the event code (the engine's timer: hvpmu::kTimerEventCode)
  uint8_t unit_mask = 0;
  bool os = false;
  bool usr = false;
  bool fixed = false;
  std::string counts;      // what an event is: "cycles", "instructions", ..., "time_ns"
};

// One function of one vCPU in one mode: what each counter counted there.
struct TruthRow {
  uint16_t domain = 0;  // kIdleDomain for the idle loop, whose "vCPU" is the CPU
  uint16_t vcpu = 0;
  Mode mode = Mode::kUser;
  std::string image;
  std::string function;          // a module's function as "function [module]"
  uint64_t start = 0;            // the function's address where it runs
  uint64_t image_address = 0;    // its address in its file (start less the mapping's bias)
  std::vector<uint64_t> events;     // per counter
  std::vector<uint64_t> overflows;  // per counter: the samples it should have produced
  std::vector<std::string> callers;  // the chain every sample of it has, innermost first
};

// A vCPU's time in each runstate since the truth was reset, and its wake-ups and migrations.
struct TruthVcpu {
  uint16_t domain = 0;
  uint16_t vcpu = 0;
  uint64_t running_ns = 0;
  uint64_t runnable_ns = 0;
  uint64_t blocked_ns = 0;
  uint64_t offline_ns = 0;
  uint64_t wakeups = 0;
  uint64_t migrations = 0;
};

// A physical CPU's idle and busy time since the truth was reset.
struct TruthCpu {
  uint16_t cpu = 0;
  uint64_t idle_ns = 0;
  uint64_t busy_ns = 0;
};

struct SchedTruth {
  uint64_t since_ns = 0;  // the last reset of the truth
  uint64_t now_ns = 0;
  std::vector<TruthVcpu> vcpus;
  std::vector<TruthCpu> cpus;
};

struct GroundTruth {
  std::string scenario;
  uint64_t seed = 0;
  uint64_t run_seed = 0;
  uint64_t sim_time_ns = 0;
  uint32_t cpus = 0;
  std::string pmu;         // the PMU model's name
  uint64_t pmis = 0;       // PMU interrupts delivered
  uint64_t ticks = 0;      // the engine's timer ticks delivered
  bool timer = false;      // the engine's timer sampled ("source": "timer"), not the PMU
  std::vector<TruthCounter> counters;
  std::vector<TruthRow> rows;  // only functions where some counter counted
  SchedTruth sched;
};

nlohmann::json ToJson(const GroundTruth& truth);
// Every member the sim writes is required; a row's `callers` may be absent.
Result<GroundTruth> ParseGroundTruth(const json::Node& node);

}  // namespace hvprof::context
