#include "hvprof/report/writers/callgraph.h"

#include <nlohmann/json.hpp>

#include "writers/common.h"

namespace hvprof::report {

namespace {

using Json = nlohmann::json;

}  // namespace

std::string FormatCallgraphText(const Profile& profile, const Callgraph& graph, const CallgraphOptions& options,
                                const ReportOptions& report) {
  std::string out;
  const std::string rule(79, '-');
  if (!report.no_header) {
    out += fmt::format("Call graph of {} ({} samples){}; callers above each symbol, callees below\n",
                       Safe(StackEventName(profile, options.filter)), graph.samples,
                       options.children ? ", ranked by inclusive samples" : "");
    out += options.children ? fmt::format("{:>10} {:>8} {:>10} {:>8}  {:<24} {}\n", "children", "%", "self", "%",
                                          "image name", "symbol name")
                            : fmt::format("{:>10} {:>8}  {:<24} {}\n", "samples", "%", "image name", "symbol name");
  }
  auto line = [&](uint32_t symbol, uint64_t count, bool indent, const std::string& suffix) {
    const Symbol& s = profile.symbols()[symbol];
    const std::string image = Safe(ImageName(profile, s.image, report));
    const std::string pad = options.children ? std::string(20, ' ') : "";
    out += fmt::format("{}{:>10} {:>7.4f}%  {}{:<24} {}{}\n", pad, count, Percent(count, graph.samples),
                       indent ? "  " : "", image, Safe(s.name), suffix);
  };
  for (const CallgraphNode& node : graph.nodes) {
    for (const Arc& caller : node.callers) line(caller.symbol, caller.count, true, "");
    const Symbol& s = profile.symbols()[node.symbol];
    const std::string domain = options.by_domain ? " (" + Safe(profile.DomainName(node.domain)) + ")" : "";
    if (options.children) {
      out += fmt::format("{:>10} {:>7.4f}% {:>10} {:>7.4f}%  {:<24} {}{} [self]\n", node.inclusive,
                         Percent(node.inclusive, graph.samples), node.self, Percent(node.self, graph.samples),
                         Safe(ImageName(profile, s.image, report)), Safe(s.name), domain);
    } else {
      out += fmt::format("{:>10} {:>7.4f}%  {:<24} {}{} [self]\n", node.self, Percent(node.self, graph.samples),
                         Safe(ImageName(profile, s.image, report)), Safe(s.name), domain);
    }
    for (const Arc& callee : node.callees) line(callee.symbol, callee.count, true, "");
    out += rule + "\n";
  }
  return out;
}

std::string FormatCallgraphCsv(const Profile& profile, const Callgraph& graph, const CallgraphOptions& options,
                               const ReportOptions& report) {
  std::string out = "node,role,domain,image,symbol,samples,%\n";
  size_t index = 0;
  for (const CallgraphNode& node : graph.nodes) {
    auto row = [&](const char* role, uint32_t symbol, uint64_t count) {
      const Symbol& s = profile.symbols()[symbol];
      out += fmt::format("{},{},{},{},{},{},{:.4f}\n", index, role,
                         CsvField(options.by_domain ? profile.DomainName(node.domain) : ""),
                         CsvField(ImageName(profile, s.image, report)), CsvField(s.name), count,
                         Percent(count, graph.samples));
    };
    for (const Arc& caller : node.callers) row("caller", caller.symbol, caller.count);
    row("self", node.symbol, node.self);
    if (options.children) row("inclusive", node.symbol, node.inclusive);
    for (const Arc& callee : node.callees) row("callee", callee.symbol, callee.count);
    ++index;
  }
  return out;
}

std::string FormatCallgraphJson(const Profile& profile, const Callgraph& graph, const CallgraphOptions& options,
                                const ReportOptions& report) {
  auto named = [&](uint32_t symbol, uint64_t count) {
    const Symbol& s = profile.symbols()[symbol];
    return Json{{"image", ImageName(profile, s.image, report)}, {"symbol", s.name}, {"resolved", s.resolved},
                {"samples", count}, {"percent", Percent(count, graph.samples)}};
  };
  Json nodes = Json::array();
  for (const CallgraphNode& node : graph.nodes) {
    Json entry = named(node.symbol, node.self);
    entry["inclusive"] = node.inclusive;
    if (options.by_domain) entry["domain"] = profile.DomainName(node.domain);
    Json callers = Json::array(), callees = Json::array();
    for (const Arc& arc : node.callers) callers.push_back(named(arc.symbol, arc.count));
    for (const Arc& arc : node.callees) callees.push_back(named(arc.symbol, arc.count));
    entry["callers"] = std::move(callers);
    entry["callees"] = std::move(callees);
    nodes.push_back(std::move(entry));
  }
  Json out{{"schema", "hvprof-callgraph"},
           {"version", 1},
           {"event", StackEventName(profile, options.filter)},
           {"samples", graph.samples},
           {"children", options.children},
           {"problems", profile.problems()},
           {"nodes", std::move(nodes)}};
  return out.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace hvprof::report
