#include "hvprof/report/writers/csv.h"

#include <algorithm>

#include "writers/common.h"

namespace hvprof::report {

std::string FormatCsv(const Profile& profile, const Table& table, const ReportOptions& options) {
  std::string out;
  std::vector<std::string> heading;
  if (options.by_domain) heading.push_back("domain");
  if (options.by_process) {
    heading.push_back("pid");
    heading.push_back("process");
  }
  heading.push_back("image");
  if (table.view != View::kImage) {
    heading.push_back("symbol");
    heading.push_back("vma");
  }
  if (table.view == View::kDebugInfo) heading.push_back("source");
  if (table.view == View::kDetails) heading.push_back("address");
  for (const Column& column : table.columns) {
    heading.push_back(column.event + " samples");
    heading.push_back(column.event + " %");
  }
  for (std::string& field : heading) field = CsvField(field);
  out += fmt::format("{}\n", fmt::join(heading, ","));
  auto emit = [&](const Row& row, const Row* detail) {
    std::vector<std::string> fields;
    if (options.by_domain) fields.push_back(CsvField(row.domain));
    if (options.by_process) {
      fields.push_back(row.pid == kNoPid ? std::string() : std::to_string(row.pid));
      fields.push_back(CsvField(row.process));
    }
    fields.push_back(CsvField(ImageName(profile, row.image, options)));
    if (table.view != View::kImage) {
      fields.push_back(CsvField(profile.symbols()[row.symbol].name));
      fields.push_back(fmt::format("{:#x}", row.address));
    }
    if (table.view == View::kDebugInfo) fields.push_back(CsvField(SourceOf(profile, row)));
    if (table.view == View::kDetails) fields.push_back(detail ? fmt::format("{:#x}", detail->address) : "");
    const Row& counts = detail != nullptr ? *detail : row;
    for (size_t c = 0; c < table.columns.size(); ++c) {
      fields.push_back(std::to_string(counts.samples[c]));
      fields.push_back(fmt::format("{:.4f}", Percent(counts.samples[c], table.columns[c].total)));
    }
    out += fmt::format("{}\n", fmt::join(fields, ","));
  };
  for (const Row& row : table.rows) {
    emit(row, nullptr);
    for (const Row& detail : row.details) emit(row, &detail);
  }
  return out;
}
}  // namespace hvprof::report
