// The call-graph view (hvprof-report -c), as opreport -c shows it: for each symbol above the
// threshold, the symbols that called it (with the samples taken under those calls), its own
// samples, and the symbols it called. With `children`, symbols rank by their inclusive count
// (their own samples and their callees'), as perf report --children does. Built from a
// Profile loaded with LoadOptions::stacks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvprof/report/model.h"
#include "hvprof/report/views/stacks.h"

namespace hvprof::report {

struct CallgraphOptions {
  StackFilter filter;
  bool by_domain = false;         // one node per domain and symbol
  bool children = false;          // rank by inclusive samples
  double threshold = 0.0;         // percent of all samples, of self (or inclusive with children)
  // --symbol: only the nodes of symbols matching these globs (each with all its callers and
  // callees); percentages stay shares of every sample the filter keeps.
  std::vector<std::string> symbols;
};

// A caller or callee of a node, and the samples taken under that call.
struct Arc {
  uint32_t symbol = kNoIndex;  // into Profile::symbols
  uint64_t count = 0;
};

struct CallgraphNode {
  uint32_t symbol = kNoIndex;
  uint16_t domain = 0;      // with by_domain
  uint64_t self = 0;        // samples taken in it
  uint64_t inclusive = 0;   // samples with it anywhere on the stack (once per stack)
  std::vector<Arc> callers; // most samples first
  std::vector<Arc> callees;
};

struct Callgraph {
  uint64_t samples = 0;  // every sample the filters keep: the base of the percentages
  std::vector<CallgraphNode> nodes;  // above the threshold, most samples first
};

Callgraph BuildCallgraph(const Profile& profile, const CallgraphOptions& options);

}  // namespace hvprof::report
