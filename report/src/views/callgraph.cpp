#include "hvprof/report/views/callgraph.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "hvprof/report/views/table.h"

namespace hvprof::report {

namespace {

struct NodeKey {
  uint16_t domain;
  uint32_t symbol;
  bool operator<(const NodeKey& other) const { return std::tie(domain, symbol) < std::tie(other.domain, other.symbol); }
};

struct Building {
  uint64_t self = 0;
  uint64_t inclusive = 0;
  std::unordered_map<uint32_t, uint64_t> callers;
  std::unordered_map<uint32_t, uint64_t> callees;
};

std::vector<Arc> Sorted(const std::unordered_map<uint32_t, uint64_t>& arcs) {
  std::vector<Arc> out;
  out.reserve(arcs.size());
  for (const auto& [symbol, count] : arcs) out.push_back({symbol, count});
  std::sort(out.begin(), out.end(), [](const Arc& a, const Arc& b) {
    return a.count != b.count ? a.count > b.count : a.symbol < b.symbol;
  });
  return out;
}

}  // namespace

Callgraph BuildCallgraph(const Profile& profile, const CallgraphOptions& options) {
  Callgraph graph;
  std::map<NodeKey, Building> nodes;
  std::vector<uint32_t> symbols;  // of one stack, leaf first
  std::vector<std::pair<uint32_t, uint32_t>> arcs;  // (callee, caller) of one stack
  for (const Stack& stack : profile.stacks()) {
    if (!options.filter.Selects(stack)) continue;
    graph.samples += stack.count;
    const uint16_t domain = options.by_domain ? stack.domain : 0;
    symbols.clear();
    for (uint32_t frame : stack.frames) symbols.push_back(profile.frames()[frame].symbol);
    if (symbols.empty()) continue;
    nodes[{domain, symbols[0]}].self += stack.count;
    // Each symbol and each call counts once per stack, however often recursion repeats it.
    arcs.clear();
    for (size_t i = 0; i + 1 < symbols.size(); ++i) arcs.emplace_back(symbols[i], symbols[i + 1]);
    std::sort(arcs.begin(), arcs.end());
    arcs.erase(std::unique(arcs.begin(), arcs.end()), arcs.end());
    for (const auto& [callee, caller] : arcs) {
      nodes[{domain, callee}].callers[caller] += stack.count;
      nodes[{domain, caller}].callees[callee] += stack.count;
    }
    std::sort(symbols.begin(), symbols.end());
    symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
    for (uint32_t symbol : symbols) nodes[{domain, symbol}].inclusive += stack.count;
  }
  const double base = graph.samples == 0 ? 1.0 : static_cast<double>(graph.samples);
  for (auto& [key, node] : nodes) {
    const uint64_t ranked = options.children ? node.inclusive : node.self;
    if (100.0 * static_cast<double>(ranked) / base < options.threshold) continue;
    // A symbol --symbol asks for is shown even if it never ran itself: its callees are why.
    if (options.symbols.empty() ? ranked == 0
                                : !MatchesAnyGlob(options.symbols, profile.symbols()[key.symbol].name)) {
      continue;
    }
    graph.nodes.push_back({key.symbol, key.domain, node.self, node.inclusive, Sorted(node.callers), Sorted(node.callees)});
  }
  std::sort(graph.nodes.begin(), graph.nodes.end(), [&](const CallgraphNode& a, const CallgraphNode& b) {
    const uint64_t x = options.children ? a.inclusive : a.self;
    const uint64_t y = options.children ? b.inclusive : b.self;
    return x != y ? x > y : std::tie(a.domain, a.symbol) < std::tie(b.domain, b.symbol);
  });
  return graph;
}

}  // namespace hvprof::report
