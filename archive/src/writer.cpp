#include "hvprof/archive/writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/archive/reader.h"
#include "hvprof/base/files.h"
#include "hvprof/base/progress.h"
#include "hvprof/base/unique_resource.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/session.h"
#include "hvprof/symbolizer/debuginfod.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::archive {

namespace sym = hvprof::symbolizer;

namespace {

constexpr uint8_t kKernel = 1;
constexpr uint8_t kHypervisor = 2;

void FreeWriter(struct archive* writer) { archive_write_free(writer); }
using Writer = UniqueResource<struct archive*, &FreeWriter, nullptr>;
using Entry = UniqueResource<struct archive_entry*, &archive_entry_free, nullptr>;

// One file of the archive: where it comes from and what it is.
struct Member {
  std::string name;    // in the archive
  std::string source;  // on this machine
  bool session_file = false;  // in a directory others may write: never through a link
  nlohmann::json manifest;    // its entry in the manifest; null for the session's files
};

// An image the samples need, as the session recorded it.
struct NeededImage {
  std::string path;
  std::string build_id;
  std::string format;  // "elf", "kallsyms", "system_map"
};

// by-path/RECORDED/PATH, or nothing for a path that could name something outside it.
std::optional<std::string> ByPathName(const std::string& path) {
  if (path.empty() || path[0] != '/') return std::nullopt;
  std::string name = kByPathFolder;
  size_t at = 1;
  while (at <= path.size()) {
    const size_t slash = std::min(path.find('/', at), path.size());
    const std::string part = path.substr(at, slash - at);
    if (part.empty() || part == "." || part == "..") return std::nullopt;
    name += "/" + part;
    at = slash + 1;
  }
  return name;
}

// Every image the session's samples (and their call chains) fall in.
class Needs {
 public:
  explicit Needs(const store::SessionMetadata& m) : m_(m) {}

  void Visit(uint16_t domain, uint8_t mode, uint64_t ip) {
    if (mode == kHypervisor || domain == store::kIdleDomain) {
      if (hypervisor_done_) return;
      hypervisor_done_ = true;
      for (const store::ImageRecord& image : m_.images) {
        if (image.role == "hypervisor") Add(image.path, image.build_id, image.format);
      }
      return;
    }
    if (mode == kKernel) {
      if (!kernels_done_.insert(domain).second) return;
      for (const store::ImageRecord& image : m_.images) {
        if ((image.role == "kernel" || image.role == "passive-kernel") && image.domain == domain) {
          Add(image.path, image.build_id, image.format);
        }
      }
      return;
    }
    // User code: counted by image (the aggregate's table names it), or not in a file.
    if (!store::IsImageWord(ip)) return;
    if (const auto it = images_by_id_.find(store::ImageOfWord(ip)); it != images_by_id_.end()) {
      Add(it->second->path, it->second->build_id, "elf");
    }
  }
  // The images user addresses were counted by (store::ImageWord).
  void UseImages(const std::vector<store::AggregateImage>& images) {
    for (const store::AggregateImage& image : images) images_by_id_[image.id] = &image;
  }
  void NeedHypervisor() { Visit(0, kHypervisor, 0); }
  const std::map<std::pair<std::string, std::string>, NeededImage>& images() const { return images_; }

 private:
  void Add(const std::string& path, const std::string& build_id, const std::string& format) {
    if (path.empty()) return;
    images_.try_emplace({path, build_id}, NeededImage{path, build_id, format});
  }
  const store::SessionMetadata& m_;
  bool hypervisor_done_ = false;
  std::set<uint16_t> kernels_done_;
  std::map<uint32_t, const store::AggregateImage*> images_by_id_;
  std::map<std::pair<std::string, std::string>, NeededImage> images_;
};

class Planner {
 public:
  Planner(const WriteOptions& options, WriteSummary& summary) : options_(options), summary_(summary) {}

  Result<void> Init() {
    if (!options_.debuginfod) return Ok();
    HVPROF_TRY(client, sym::Debuginfod::FromEnvironment());
    debuginfod_ = std::move(client);
    return Ok();
  }

  // Adds `image` (and its debug file) to `members`, or says in `problems` why it cannot.
  void Place(const NeededImage& image, std::vector<Member>& members, std::vector<std::string>& problems) {
    std::error_code ec;
    const bool elf = image.format != "kallsyms" && image.format != "system_map";
    // As the report looks it up (report/load.cpp): lower-case hex, else by path.
    std::string id;
    if (!sym::NormalizeBuildIdHex(image.build_id, &id) || id.size() <= 2) id.clear();
    if (!elf || id.empty()) {
      auto name = ByPathName(image.path);
      if (!name) {
        problems.push_back(fmt::format("{}: not an absolute path without '.' or '..'; not archived", image.path));
        return;
      }
      if (!std::filesystem::exists(image.path, ec)) {
        problems.push_back(fmt::format("{} is gone: its samples cannot be symbolized from the archive (put it back, "
                                       "or archive with --partial to go without it)",
                                       image.path));
        return;
      }
      members.push_back({*name, image.path, false,
                         {{"name", *name}, {"path", image.path}, {"kind", "image"}, {"from", "local"}}});
      summary_.notes.push_back(fmt::format(
          "{} has no build-id{}: stored by its path as {} (nothing can check it is the file that was profiled)",
          image.path, elf ? "" : fmt::format(" (a {} file)", image.format), *name));
      if (elf) {
        // Its separate debug file (found through .gnu_debuglink) beside it, where the symbolizer looks.
        auto info = symbolizer_.Describe(sym::ImageSpec::Elf(image.path));
        if (info && !info.value().debug_file.empty()) {
          const std::string debug_name = Dirname(*name) + "/" + Basename(info.value().debug_file);
          members.push_back({debug_name, info.value().debug_file, false,
                             {{"name", debug_name}, {"path", info.value().debug_file}, {"kind", "debug"},
                              {"from", "local"}}});
        }
      }
      return;
    }
    const std::string name = fmt::format("{}/{}/{}", kBuildIdFolder, id.substr(0, 2), id.substr(2));
    std::string source = image.path;
    std::string from = "local";
    auto info = symbolizer_.Describe(sym::ImageSpec::Elf(image.path));
    std::string found_id = info ? info.value().build_id : std::string();
    if (!info || found_id != id) {
      std::string fetched_problem;
      if (debuginfod_) {
        auto fetched = debuginfod_->FindExecutable(id);
        if (fetched) {
          source = fetched.value();
          from = "debuginfod";
          info = symbolizer_.Describe(sym::ImageSpec::Elf(source));
          summary_.notes.push_back(fmt::format("{} (build-id {}) came from debuginfod", image.path, id));
        } else {
          fetched_problem = "; " + fetched.error().message();
        }
      }
      if (from != "debuginfod") {
        const std::string advice =
            "put the profiled file back at that path, set DEBUGINFOD_URLS to a debuginfod server that has it, or "
            "archive with --partial to go without it";
        if (!info) {
          problems.push_back(fmt::format("{} cannot be archived: {}{}; {}", image.path, info.error().message(),
                                         fetched_problem, advice));
        } else {
          problems.push_back(fmt::format(
              "{} is not the file that was profiled: its build-id is {} where the session recorded {}{}; {}", image.path,
              found_id.empty() ? "none" : found_id, id, fetched_problem, advice));
        }
        return;
      }
    }
    members.push_back({name, source, false,
                       {{"name", name}, {"path", image.path}, {"build_id", id}, {"kind", "image"}, {"from", from}}});
    // Its debug file: the one found here, else debuginfod's when the image lacks a symbol table or DWARF.
    std::string debug = info ? info.value().debug_file : std::string();
    std::string debug_from = "local";
    if (debug.empty() && info && (info.value().symbol_table != ".symtab" || !info.value().has_dwarf) && debuginfod_) {
      if (auto fetched = debuginfod_->FindDebuginfo(id)) {
        debug = fetched.value();
        debug_from = "debuginfod";
        summary_.notes.push_back(fmt::format("the debug info of {} (build-id {}) came from debuginfod", image.path, id));
      }
    }
    if (!debug.empty()) {
      members.push_back({name + ".debug", debug, false,
                         {{"name", name + ".debug"}, {"path", debug}, {"build_id", id}, {"kind", "debug"},
                          {"from", debug_from}}});
    }
  }

 private:
  const WriteOptions& options_;
  WriteSummary& summary_;
  sym::Symbolizer symbolizer_;
  std::unique_ptr<sym::Debuginfod> debuginfod_;
};

Result<void> AddMember(struct archive* writer, const Member& member, const std::string& output, uint64_t* bytes) {
  HVPROF_TRY(fd, member.session_file ? OpenRegularFile(member.source, O_RDONLY)
                                     : OpenFile(member.source.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", member.source));
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorKind::kInvalidArgument, "{} is not a regular file; not archived", member.source);
  }
  Entry entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), member.name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), st.st_size);
  archive_entry_set_mtime(entry.get(), st.st_mtime, 0);
  if (archive_write_header(writer, entry.get()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kIo, "{}: cannot add {}: {}", output, member.name, archive_error_string(writer));
  }
  std::vector<char> buffer(size_t{1} << 20);
  uint64_t copied = 0;
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, fmt::format("cannot read {}", member.source));
    }
    if (n == 0) break;
    if (copied + static_cast<uint64_t>(n) > static_cast<uint64_t>(st.st_size)) break;
    if (archive_write_data(writer, buffer.data(), static_cast<size_t>(n)) != n) {
      return MakeError(ErrorKind::kIo, "{}: cannot write {}: {}", output, member.name, archive_error_string(writer));
    }
    copied += static_cast<uint64_t>(n);
  }
  if (copied != static_cast<uint64_t>(st.st_size)) {
    return MakeError(ErrorKind::kBusy, "{} changed size while it was archived; archive it again", member.source);
  }
  *bytes += copied;
  return Ok();
}

Result<void> AddText(struct archive* writer, const std::string& name, const std::string& text, const std::string& output) {
  Entry entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(text.size()));
  archive_entry_set_mtime(entry.get(), ::time(nullptr), 0);
  if (archive_write_header(writer, entry.get()) != ARCHIVE_OK ||
      archive_write_data(writer, text.data(), text.size()) != static_cast<la_ssize_t>(text.size())) {
    return MakeError(ErrorKind::kIo, "{}: cannot add {}: {}", output, name, archive_error_string(writer));
  }
  return Ok();
}

}  // namespace

Result<WriteSummary> WriteArchive(const std::string& session_directory, const std::string& output,
                                  const WriteOptions& options) {
  HVPROF_TRY(session, store::OpenSession(session_directory));
  const store::SessionMetadata& m = session.metadata;
  const std::string directory = session.directory;
  if (!m.profiling.empty() && m.profiling.back().stop_ns == 0 && store::SessionWriterAlive(directory)) {
    return MakeError(ErrorKind::kBadState,
                     "{} is still being written by hvprofd: `hvprof --stop` first (or --save=NAME, and archive NAME)",
                     directory);
  }
  WriteSummary summary;
  // The session's own files, all of them (published profiles included).
  std::vector<Member> members;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(directory, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_symlink(ec) || !it->is_regular_file(ec)) {
      if (!it->is_directory(ec) || it->is_symlink(ec)) {
        summary.notes.push_back(fmt::format("{} is not a regular file; not archived", it->path().string()));
      }
      continue;
    }
    const std::string relative = std::filesystem::relative(it->path(), directory, ec).string();
    members.push_back({std::string(kSessionFolder) + "/" + relative, it->path().string(), true, nullptr});
  }
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot list {}", directory));

  // What the samples need: every sampled address and every frame of their call chains.
  Needs needs(m);
  const std::string samples = directory + "/" + store::kSamplesFile;
  store::Aggregate aggregate;
  if (std::filesystem::exists(samples, ec)) {
    // User addresses are counted by the image they were in, as the processes were then
    // (context.hvc; session.json's list in a session from before it).
    store::ContextIndex context;
    HVPROF_TRY(read, store::ReadContextFile(directory + "/" + store::kContextFile, m.session_id, context));
    if (!read.present) store::ContextFromMetadata(m, context);
    const auto id = store::ParseSessionId(m.session_id);
    HVPROF_TRY(counted, store::AggregateSamplesFile(
                            samples, nullptr, id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt,
                            store::StackDetail::kStacks, {}, 0, store::Translation{&context, false}));
    aggregate = std::move(counted);
    needs.UseImages(aggregate.images);
    for (const store::AggregateEntry& entry : aggregate.entries) {
      needs.Visit(entry.key.domain, entry.key.mode, entry.key.ip);
    }
    for (const store::CountedStack& stack : aggregate.stacks) {
      const auto words = aggregate.Addresses(stack);
      for (const uint64_t word : words) needs.Visit(stack.key.domain, stack.key.mode, word);
    }
  }
  // The guests' published profiles leave their hypervisor addresses to dom0.
  if (std::filesystem::exists(directory + "/published", ec)) needs.NeedHypervisor();

  Planner planner(options, summary);
  HVPROF_TRYV(planner.Init());
  std::vector<std::string> problems;
  for (const auto& [key, image] : needs.images()) planner.Place(image, members, problems);
  if (!problems.empty() && !options.partial) {
    std::string message = fmt::format("cannot archive {}: {} of the images its samples need cannot be added:",
                                      directory, problems.size());
    for (const std::string& problem : problems) message += "\n  " + problem;
    return Error(ErrorKind::kNotFound, message);
  }
  for (const std::string& problem : problems) summary.notes.push_back("left out: " + problem);
  // One entry per name (two mappings of one image, one image under two recorded paths).
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.name < b.name; });
  members.erase(std::unique(members.begin(), members.end(),
                            [](const Member& a, const Member& b) { return a.name == b.name; }),
                members.end());

  nlohmann::json manifest = {{"hvprof_archive", kArchiveVersion},
                             {"session_directory", std::filesystem::absolute(directory, ec).string()},
                             {"session_id", m.session_id},
                             {"files", nlohmann::json::array()}};
  for (const Member& member : members) {
    if (!member.manifest.is_null()) manifest["files"].push_back(member.manifest);
  }

  HVPROF_TRY(out, OutputFile::Open(output));
  Writer writer(archive_write_new());
  if (!writer.valid()) return MakeError(ErrorKind::kNoSpace, "libarchive: cannot allocate a writer");
  // pax where a name needs it (long paths), plain ustar otherwise: every tar reads it.
  if (archive_write_set_format_pax_restricted(writer.get()) != ARCHIVE_OK ||
      archive_write_add_filter_none(writer.get()) != ARCHIVE_OK ||
      archive_write_open_fd(writer.get(), out.fd()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kIo, "{}: cannot start a tar: {}", output, archive_error_string(writer.get()));
  }
  HVPROF_TRYV(AddText(writer.get(), kManifestFile, manifest.dump(2) + "\n", output));
  Progress progress("hvprof archive: files written", members.size());
  for (const Member& member : members) {
    HVPROF_TRYV(AddMember(writer.get(), member, output, &summary.bytes));
    progress.Advance();
  }
  progress.Done();
  summary.files = members.size() + 1;
  if (archive_write_close(writer.get()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kIo, "{}: cannot finish the tar: {}", output, archive_error_string(writer.get()));
  }
  HVPROF_TRYV(out.Commit());
  return summary;
}

}  // namespace hvprof::archive
