// Code a JIT runtime described (perf maps, jitdumps), named by the time of each sample.
#include "profile_builder.h"

namespace hvprof::report {

const sym::JitTable* ProfileBuilder::JitTableOf(uint16_t domain, uint32_t pid) {
  if (p_.metadata_.jit.empty()) return nullptr;
  auto [it, added] = jit_tables_.try_emplace({domain, pid});
  if (!added) return it->second.get();
  auto table = std::make_unique<sym::JitTable>();
  std::set<std::string> read_files;
  for (const store::JitRecord& record : p_.metadata_.jit) {
    if (record.domain != domain || record.pid != pid || record.file.empty() || record.bytes == 0) continue;
    if (!read_files.insert(record.file).second) continue;  // listed twice
    const std::string path = p_.directory_ + "/" + record.file;
    // The copies are bounded when made; a session from elsewhere is bounded here too, each copy
    // and all of them together.
    constexpr size_t kMaxJitBytes = size_t(2) << 30;
    if (jit_bytes_read_ >= kMaxJitBytes) {
      NoteOnce(fmt::format("the session's JIT copies hold more than {} bytes: the rest were not read", kMaxJitBytes));
      break;
    }
    auto text = ReadFileToString(path, kMaxJitBytes - jit_bytes_read_, Links::kRefuse);
    if (text) jit_bytes_read_ += text.value().size();
    if (!text) {
      p_.problems_.push_back(fmt::format("the {} of pid {} cannot be read: {}", record.kind, pid, text.error().message()));
      continue;
    }
    sym::JitParseStats stats;
    if (record.kind == "jitdump") {
      sym::JitDump dump = sym::ParseJitDump(std::as_bytes(std::span(text.value().data(), text.value().size())), &stats);
      if (!dump.valid) {
        p_.problems_.push_back(fmt::format("{} (the jitdump of pid {}) is not one: {}", path, pid, dump.error));
        continue;
      }
      // Its times are CLOCK_MONOTONIC, the linux platform's sample clock; the TSC
      // (arch_timestamp) or another platform's clock cannot be compared: then the later record
      // at an address names it whenever it was sampled.
      if (dump.header.arch_timestamp || p_.metadata_.platform != "linux") {
        for (sym::JitSymbol& symbol : dump.symbols) symbol.valid_from_ns = 0;
      }
      table->Add(std::move(dump.symbols));
    } else {
      // The last line may still have been written when the copy was made.
      table->Add(sym::ParsePerfMap(text.value(), &stats, /*complete=*/false));
    }
    if (stats.malformed + stats.too_long != 0) {
      NoteOnce(fmt::format("{} of pid {} ({}): {} malformed entries skipped{}{}", record.kind, pid,
                                     record.source, stats.malformed + stats.too_long,
                                     stats.problems.empty() ? "" : ", the first: ",
                                     stats.problems.empty() ? "" : stats.problems.front()));
    }
  }
  table->Finish();
  if (!table->empty()) it->second = std::move(table);
  return it->second.get();
}

Result<bool> ProfileBuilder::SplitJitByTime(const std::string& samples_path) {
  std::map<std::pair<uint16_t, uint32_t>, const sym::JitTable*> reused;
  for (const auto& [key, table] : jit_tables_) {
    if (table && table->has_reuse()) reused[key] = table.get();
  }
  if (reused.empty()) return false;
  // The entries of those processes by (domain, pid, event, address).
  std::map<std::tuple<uint16_t, uint32_t, uint8_t, uint64_t>, size_t> index;
  for (size_t e = 0; e < p_.entries_.size(); ++e) {
    const Entry& entry = p_.entries_[e];
    if (entry.mode == kUser && reused.contains({entry.domain, entry.pid})) {
      index[{entry.domain, entry.pid, entry.event, entry.ip}] = e;
    }
  }
  struct Seen {
    uint64_t count = 0;
    uint64_t first_ns = UINT64_MAX;
    uint64_t last_ns = 0;
  };
  std::map<std::pair<size_t, const sym::JitSymbol*>, Seen> counts;
  const auto id = store::ParseSessionId(p_.metadata_.session_id);
  auto read = store::ReadSamplesFile(
      samples_path,
      [&](const store::StoredSample& sample) {
        if (sample.mode != kUser) return;
        const auto table = reused.find({sample.domain, sample.pid});
        if (table == reused.end()) return;
        const auto entry = index.find({sample.domain, sample.pid, sample.event, sample.ip});
        if (entry == index.end()) return;
        Seen& seen = counts[{entry->second, table->second->Find(sample.ip, sample.time_ns)}];
        ++seen.count;
        seen.first_ns = std::min(seen.first_ns, sample.time_ns);
        seen.last_ns = std::max(seen.last_ns, sample.time_ns);
      },
      id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt);
  if (!read) {
    for (const auto& [key, table] : reused) {
      NoteOnce(fmt::format("pid {} loaded new JIT code over old code's addresses, and without the raw samples' times "
                           "({}) its samples there are named by the latest code", key.second, read.error().message()));
    }
    return false;
  }
  bool split = false;
  for (auto it = counts.begin(); it != counts.end();) {
    const size_t e = it->first.first;
    std::vector<std::pair<const sym::JitSymbol*, Seen>> names;
    uint64_t sum = 0;
    for (; it != counts.end() && it->first.first == e; ++it) {
      names.emplace_back(it->first.second, it->second);
      sum += it->second.count;
    }
    // Only what the raw samples account for exactly (a session still being written may differ).
    if (names.size() < 2 || sum != p_.entries_[e].count) continue;
    split = true;
    const Entry original = p_.entries_[e];
    const std::string& image_name = p_.images_[original.image].name;
    for (size_t n = 0; n < names.size(); ++n) {
      Entry piece = original;
      piece.count = names[n].second.count;
      piece.line = kNoIndex;
      if (const sym::JitSymbol* symbol = names[n].first) {
        piece.symbol = SymbolIndex(original.image, symbol->name, symbol->start, true, "");
        if (options_.lines && !symbol->file.empty()) piece.line = LineIndex(symbol->file, symbol->line);
      } else {
        piece.symbol = SymbolIndex(original.image, fmt::format("[unknown in {}]", image_name), 0, false,
                                   "no JIT code was there yet when it was sampled");
      }
      // Each name held the address over one span of time (the code there changed at load
      // times only): the span of its samples' times tells its samples apart again later.
      p_.time_splits_.push_back({n == 0 ? e : p_.entries_.size(), names[n].second.first_ns, names[n].second.last_ns});
      if (n == 0) p_.entries_[e] = piece;
      else p_.entries_.push_back(piece);
    }
  }
  if (split) {
    for (const auto& [key, table] : reused) {
      NoteOnce(fmt::format("pid {} loaded new JIT code over old code's addresses during the session: each sample "
                           "there is named by the code its time found", key.second));
    }
  }
  return split;
}

void ProfileBuilder::SymbolizeJit(Target& target) {
  const uint32_t image = ImageIndex(target.name, "", true);
  for (size_t e : target.entries) {
    Entry& entry = (*out_)[e];
    entry.image = image;
    const sym::JitSymbol* found = target.jit->Find(entry.address);
    if (found == nullptr) {
      entry.symbol = SymbolIndex(image, fmt::format("[unknown in {}]", target.name), 0, false,
                                 "no perf map or jitdump entry holds the address");
      continue;
    }
    entry.symbol = SymbolIndex(image, found->name, found->start, true, "");
    if (options_.lines && !found->file.empty()) entry.line = LineIndex(found->file, found->line);
  }
}

}  // namespace hvprof::report
