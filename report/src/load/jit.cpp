// Code a JIT runtime described (perf maps, jitdumps), named by the time of each sample.
#include "profile_builder.h"

namespace hvprof::report {

const sym::JitTable* ProfileBuilder::JitTableOf(uint16_t domain, uint32_t pid) {
  if (p_.metadata.jit.empty()) return nullptr;
  auto [it, added] = jit_tables_.try_emplace({domain, pid});
  if (!added) return it->second.get();
  auto table = std::make_unique<sym::JitTable>();
  std::set<std::string> read_files;
  for (const store::JitRecord& record : p_.metadata.jit) {
    if (record.domain != domain || record.pid != pid || record.file.empty() || record.bytes == 0) continue;
    if (!read_files.insert(record.file).second) continue;  // listed twice
    const std::string path = p_.directory + "/" + record.file;
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
      jit_problems_[{domain, pid}].push_back(
          fmt::format("the {} of pid {} cannot be read: {}", record.kind, pid, text.error().message()));
      continue;
    }
    sym::JitParseStats stats;
    if (record.kind == "jitdump") {
      sym::JitDump dump = sym::ParseJitDump(std::as_bytes(std::span(text.value().data(), text.value().size())), &stats);
      if (!dump.valid) {
        jit_problems_[{domain, pid}].push_back(
            fmt::format("{} (the jitdump of pid {}) is not one: {}", path, pid, dump.error));
        continue;
      }
      // Its times are CLOCK_MONOTONIC, the linux platform's sample clock; the TSC
      // (arch_timestamp) or another platform's clock cannot be compared: then the later record
      // at an address names it whenever it was sampled.
      if (dump.header.arch_timestamp || p_.metadata.platform != "linux") {
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

ReusedJit ProfileBuilder::ReusedJitTables(const store::Aggregate* counted) {
  ReusedJit reused;
  if (p_.metadata.jit.empty()) return reused;
  std::set<std::pair<uint16_t, uint32_t>> sampled;  // with `counted`: the processes it counts by process
  if (counted != nullptr) {
    for (const store::AggregateEntry& entry : counted->entries) {
      if (entry.key.mode == kUser && entry.key.pid != store::kAnyProcess) sampled.insert({entry.key.domain, entry.key.pid});
    }
  }
  for (const store::JitRecord& record : p_.metadata.jit) {
    if (reused.contains({record.domain, record.pid})) continue;
    if (counted != nullptr && !sampled.contains({record.domain, record.pid})) continue;
    const sym::JitTable* table = JitTableOf(record.domain, record.pid);
    if (table != nullptr && table->has_reuse()) reused[{record.domain, record.pid}] = table;
  }
  return reused;
}

void ProfileBuilder::NoteJitProblems() {
  if (jit_problems_.empty()) return;
  std::set<std::pair<uint16_t, uint32_t>> sampled;
  for (const Entry& entry : p_.entries) {
    if (entry.mode == kUser) sampled.insert({entry.domain, entry.pid});
  }
  for (auto& [process, problems] : jit_problems_) {
    if (!sampled.contains(process)) continue;
    for (std::string& problem : problems) p_.problems.push_back(std::move(problem));
  }
  jit_problems_.clear();
}

store::SampleWatch JitWatch::Watch() {
  if (reused_.empty()) return {};
  return [this](unsigned) -> store::SampleObserver {
    JitSeenMap& seen = per_reader_.emplace_back();
    return [this, &seen](const store::StoredSample& sample, uint32_t slice) {
      if (sample.mode != kUser) return;
      const auto table = reused_.find({sample.domain, sample.pid});
      if (table == reused_.end()) return;
      JitSeen& one = seen[{sample.domain, sample.pid, sample.event, sample.ip, table->second->Find(sample.ip, sample.time_ns)}];
      ++one.count;
      if (slices_ != 0) {
        one.slices.resize(slices_);
        ++one.slices[slice];
      }
    };
  };
}

JitSeenMap JitWatch::Merged() {
  JitSeenMap merged;
  for (JitSeenMap& seen : per_reader_) {
    for (auto& [key, one] : seen) {
      JitSeen& into = merged[key];
      into.count += one.count;
      into.slices.resize(std::max(into.slices.size(), one.slices.size()));
      for (size_t k = 0; k < one.slices.size(); ++k) into.slices[k] += one.slices[k];
    }
    JitSeenMap().swap(seen);
  }
  return merged;
}

bool ProfileBuilder::SplitJitByTime(const ReusedJit& reused, const JitSeenMap& seen) {
  if (reused.empty()) return false;
  // The entries of those processes by (domain, pid, event, address).
  std::map<std::tuple<uint16_t, uint32_t, uint8_t, uint64_t>, size_t> index;
  for (size_t e = 0; e < p_.entries.size(); ++e) {
    const Entry& entry = p_.entries[e];
    if (entry.mode == kUser && reused.contains({entry.domain, entry.pid})) {
      index[{entry.domain, entry.pid, entry.event, entry.ip}] = e;
    }
  }
  const uint32_t slices = p_.time_slices;
  bool split = false;
  for (auto it = seen.begin(); it != seen.end();) {
    const auto [domain, pid, event, ip, first_symbol] = it->first;
    const auto entry = index.find({domain, pid, event, ip});
    std::vector<std::pair<const sym::JitSymbol*, const JitSeen*>> names;
    uint64_t sum = 0;
    for (; it != seen.end() && std::get<0>(it->first) == domain && std::get<1>(it->first) == pid &&
           std::get<2>(it->first) == event && std::get<3>(it->first) == ip;
         ++it) {
      names.emplace_back(std::get<4>(it->first), &it->second);
      sum += it->second.count;
    }
    // Only what the raw samples account for exactly (a session still being written may differ).
    if (entry == index.end() || names.size() < 2 || sum != p_.entries[entry->second].count) continue;
    split = true;
    const size_t e = entry->second;
    const Entry original = p_.entries[e];
    const std::string& image_name = p_.images[original.image].name;
    for (size_t n = 0; n < names.size(); ++n) {
      Entry piece = original;
      piece.count = names[n].second->count;
      piece.line = kNoIndex;
      if (const sym::JitSymbol* symbol = names[n].first) {
        piece.symbol = SymbolIndex(original.image, symbol->name, symbol->start, true, "");
        if (options_.lines && !symbol->file.empty()) piece.line = LineIndex(symbol->file, symbol->line);
      } else {
        piece.symbol = SymbolIndex(original.image, fmt::format("[unknown in {}]", image_name), 0, false,
                                   "no JIT code was there yet when it was sampled");
      }
      // Each piece's time slices are its own samples'.
      const size_t at = n == 0 ? e : p_.entries.size();
      if (n == 0) p_.entries[e] = piece;
      else p_.entries.push_back(piece);
      if (slices != 0) {
        p_.slice_counts.resize(p_.entries.size() * slices, 0);
        const std::vector<uint32_t>& own = names[n].second->slices;
        for (uint32_t k = 0; k < slices; ++k) p_.slice_counts[at * slices + k] = k < own.size() ? own[k] : 0;
      }
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
