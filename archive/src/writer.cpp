#include "hvprof/archive/writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/archive/reader.h"
#include "hvprof/base/files.h"
#include "hvprof/base/progress.h"
#include "hvprof/base/unique_resource.h"
#include "hvprof/buildid_cache/cache.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/sampled_images.h"
#include "hvprof/store/session.h"
#include "hvprof/symbolizer/debuginfod.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::archive {

namespace sym = hvprof::symbolizer;

namespace {

void FreeWriter(struct archive* writer) { archive_write_free(writer); }
using Writer = UniqueResource<struct archive*, &FreeWriter, nullptr>;
using Entry = UniqueResource<struct archive_entry*, &archive_entry_free, nullptr>;

// One file of the archive: where it comes from and what it is.
struct Member {
  std::string name;    // in the archive
  std::string source;  // on this machine
  bool session_file = false;  // in the session directory (checked trusted): never through a link
  nlohmann::json manifest;    // its entry in the manifest; null for the session's files
  std::string build_id;       // what the file must have (an image or debug file by build-id)
  bool kernel_map = false;    // kallsyms or System.map: empty, or without addresses, is refused
  struct stat planned {};     // as it was when planned; st_ino 0 until then
};

// How a file named by a session (not one of its own files) is opened for the archive: through
// base's OpenUserFile, links on the way followed (a scenario names /usr/lib/...so.5), never a
// FIFO waited on or a device opened, and saying who else could have replaced it.
Result<UserFile> OpenNamedFile(const std::string& path) {
  return OpenUserFile(path, FileTrust{.links = Links::kFollow, .users = {}, .refuse_replaceable = false,
                                      .check_path = true});
}

// The build-id of the file open at `fd` (read through /proc/self/fd: what was checked is what is
// copied), or an error saying why it has none that can be read.
std::string BuildIdOf(sym::Symbolizer& symbolizer, int fd) {
  auto info = symbolizer.Describe(sym::ImageSpec::Elf(fmt::format("/proc/self/fd/{}", fd)));
  return info ? info.value().build_id : std::string();
}

// An image the samples need, as the session recorded it.
using NeededImage = store::SampledImage;

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

class Planner {
 public:
  Planner(const WriteOptions& options, WriteSummary& summary, std::vector<std::string> caches)
      : options_(options), summary_(summary), caches_(std::move(caches)) {}

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
    // As the report looks it up (report/src/load/targets.cpp): lower-case hex, else by path.
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
      // Nothing checks what such a file holds, so only one nobody else could have replaced is
      // taken: else a user's process could have its image swapped for a file of root's alone.
      if (!PlanByPath(Member{*name, image.path, false,
                             {{"name", *name}, {"path", image.path}, {"kind", "image"}, {"from", "local"}}, "",
                             !elf, {}},
                      members, problems)) {
        return;
      }
      summary_.notes.push_back(fmt::format(
          "{} has no build-id{}: stored by its path as {} (nothing can check it is the file that was profiled)",
          image.path, elf ? "" : fmt::format(" (a {} file)", image.format), *name));
      if (elf) {
        // Its separate debug file (found through .gnu_debuglink) beside it, where the symbolizer looks.
        auto info = symbolizer_.Describe(sym::ImageSpec::Elf(image.path));
        if (info && !info.value().debug_file.empty()) {
          const std::string debug_name = Dirname(*name) + "/" + Basename(info.value().debug_file);
          PlanByPath(Member{debug_name, info.value().debug_file, false,
                            {{"name", debug_name}, {"path", info.value().debug_file}, {"kind", "debug"},
                             {"from", "local"}},
                            "", false, {}},
                     members, problems);
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
      // Rebuilt or removed since: hvprofd's copy in the build-id cache, when it kept one.
      if (const std::string cached = buildid_cache::FindImage(caches_, id); !cached.empty()) {
        // With its debug file from beside it, when hvprofd kept one.
        sym::ImageSpec spec = sym::ImageSpec::Elf(cached);
        if (std::filesystem::is_regular_file(cached + ".debug", ec)) spec.debug_file = cached + ".debug";
        auto cached_info = symbolizer_.Describe(spec);
        if (cached_info && cached_info.value().build_id == id) {
          source = cached;
          from = "build-id cache";
          info = std::move(cached_info);
          found_id = id;
          summary_.notes.push_back(fmt::format("{} (build-id {}) came from the build-id cache, {}", image.path, id, cached));
        }
      }
    }
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
                       {{"name", name}, {"path", image.path}, {"build_id", id}, {"kind", "image"}, {"from", from}},
                       id, false, {}});
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
                          {"from", debug_from}},
                         id, false, {}});
    }
  }

  // What was left out because someone else could have replaced it: for the manifest.
  const nlohmann::json& skipped() const { return skipped_; }

 private:
  // Adds a file stored by its path, after a look at it. A FIFO, a device or a file that is gone
  // is a problem; so is one that someone other than root and this user could have replaced
  // (nothing checks what it holds: it could be a link to a file of root's alone, or a hard link
  // to one), which --partial leaves out with an entry in the manifest's "skipped".
  bool PlanByPath(Member member, std::vector<Member>& members, std::vector<std::string>& problems) {
    auto opened = OpenNamedFile(member.source);
    if (!opened) {
      problems.push_back(fmt::format("{} cannot be archived: {}", member.source, opened.error().message()));
      return false;
    }
    if (!opened.value().replaceable.empty()) {
      const std::string why = fmt::format("someone other than root{} could have replaced it: {}",
                                          ::geteuid() == 0 ? "" : " and you", opened.value().replaceable);
      problems.push_back(fmt::format("{} is not archived, since {}, and nothing checks what a file without a build-id "
                                     "holds (archive with --partial to go without it)",
                                     member.source, why));
      skipped_.push_back({{"path", member.source}, {"why", why}});
      return false;
    }
    member.planned = opened.value().st;
    members.push_back(std::move(member));
    return true;
  }

  nlohmann::json skipped_ = nlohmann::json::array();
  const WriteOptions& options_;
  WriteSummary& summary_;
  std::vector<std::string> caches_;  // build-id caches, searched in order
  sym::Symbolizer symbolizer_;
  std::unique_ptr<sym::Debuginfod> debuginfod_;
};

// The bytes of a file whose size stat does not know (kallsyms in /proc says 0), read to its end.
constexpr size_t kMaxUnsizedBytes = size_t{1} << 30;

// Why a kernel map (kallsyms, System.map) cannot serve: empty, or with every address 0 (a
// kallsyms read by a user kernel.kptr_restrict hides them from); empty when it can.
std::string UselessKernelMap(std::string_view text) {
  if (text.find_first_not_of(" \t\n") == std::string_view::npos) return "it is empty";
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view address = text.substr(at, std::min(text.find(' ', at), end) - at);
    if (address.find_first_not_of("0") != std::string_view::npos) return {};
    at = end + 1;
  }
  return "every address in it is 0 (kernel.kptr_restrict hides them from this user: archive as root)";
}

Result<void> AddMember(struct archive* writer, const Member& member, const std::string& output,
                       sym::Symbolizer& symbolizer, uint64_t* bytes, bool* world_readable) {
  UserFile file;
  if (member.session_file) {
    HVPROF_TRY(fd, OpenRegularFile(member.source, O_RDONLY));
    file.fd = std::move(fd);
    if (::fstat(file.fd.get(), &file.st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", member.source));
  } else {
    HVPROF_TRY(opened, OpenNamedFile(member.source));
    file = std::move(opened);
  }
  const struct stat& st = file.st;
  // The file that was planned, and nobody else's since.
  if (member.planned.st_ino != 0 && (member.planned.st_ino != st.st_ino || member.planned.st_dev != st.st_dev ||
                                     !file.replaceable.empty())) {
    return MakeError(ErrorKind::kBusy, "{} was replaced while it was archived; archive again", member.source);
  }
  if (!member.build_id.empty()) {
    const std::string found = BuildIdOf(symbolizer, file.fd.get());
    if (found != member.build_id) {
      return MakeError(ErrorKind::kBusy, "{} has build-id {} where {} was expected (was it replaced meanwhile?); not "
                       "archived",
                       member.source, found.empty() ? "none" : found, member.build_id);
    }
  }
  // Its bytes: read whole when stat has no size for it (procfs), else streamed.
  std::optional<std::string> whole;
  if (st.st_size == 0 || member.kernel_map) {
    HVPROF_TRY(text, ReadToEnd(file.fd.get(), member.source, kMaxUnsizedBytes, static_cast<size_t>(st.st_size)));
    whole = std::move(text);
    if (member.kernel_map) {
      if (const std::string why = UselessKernelMap(*whole); !why.empty()) {
        return MakeError(ErrorKind::kInvalidArgument, "{}, the kernel's symbols the session recorded, cannot be "
                         "archived: {}; a report of the archive would show no kernel symbols",
                         member.source, why);
      }
    }
  }
  const uint64_t size = whole ? whole->size() : static_cast<uint64_t>(st.st_size);
  // Each file keeps who may read it: one only root could read stays so in the tar.
  const mode_t mode = st.st_mode & 0777;
  if ((mode & S_IROTH) == 0) *world_readable = false;
  Entry entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), member.name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), mode);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(size));
  archive_entry_set_mtime(entry.get(), st.st_mtime, 0);
  if (archive_write_header(writer, entry.get()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kIo, "{}: cannot add {}: {}", output, member.name, archive_error_string(writer));
  }
  if (whole) {
    if (archive_write_data(writer, whole->data(), whole->size()) != static_cast<la_ssize_t>(whole->size())) {
      return MakeError(ErrorKind::kIo, "{}: cannot write {}: {}", output, member.name, archive_error_string(writer));
    }
    *bytes += whole->size();
    return Ok();
  }
  std::vector<char> buffer(size_t{1} << 20);
  uint64_t copied = 0;
  while (true) {
    const ssize_t n = ::read(file.fd.get(), buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, fmt::format("cannot read {}", member.source));
    }
    if (n == 0) break;
    if (copied + static_cast<uint64_t>(n) > size) {
      copied += static_cast<uint64_t>(n);
      break;
    }
    if (archive_write_data(writer, buffer.data(), static_cast<size_t>(n)) != n) {
      return MakeError(ErrorKind::kIo, "{}: cannot write {}: {}", output, member.name, archive_error_string(writer));
    }
    copied += static_cast<uint64_t>(n);
  }
  if (copied != size) {
    return MakeError(ErrorKind::kBusy, "{} changed size while it was archived; archive it again", member.source);
  }
  *bytes += copied;
  return Ok();
}

Result<void> AddText(struct archive* writer, const std::string& name, const std::string& text, const std::string& output,
                     mode_t mode) {
  Entry entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), mode);
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
  // Its files are read as they are, by whoever runs this (root, often): only from a directory
  // that nobody but root and this user could have changed, as --start-daemon asks.
  HVPROF_TRYV(CheckTrustedDirectory(session_directory, "archiving",
                                    "or copy the session somewhere of your own and archive the copy"));
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
    Member member{std::string(kSessionFolder) + "/" + relative, it->path().string(), true, nullptr, "", false, {}};
    if (::lstat(member.source.c_str(), &member.planned) != 0) member.planned = {};
    members.push_back(std::move(member));
  }
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot list {}", directory));

  // What the samples need: every sampled address and every frame of their call chains.
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
  }
  // The guests' published profiles leave their hypervisor addresses to dom0.
  const bool published = std::filesystem::exists(directory + "/published", ec);
  const std::vector<store::SampledImage> needed = store::SampledImagesOf(m, aggregate, published);

  Planner planner(options, summary, buildid_cache::SearchDirectories(m.build_id_cache));
  HVPROF_TRYV(planner.Init());
  std::vector<std::string> problems;
  for (const store::SampledImage& image : needed) planner.Place(image, members, problems);
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
  if (!planner.skipped().empty()) manifest["skipped"] = planner.skipped();

  // Private (0600) while written, and after unless every file in it is world-readable.
  HVPROF_TRY(out, OutputFile::Open(output, OutputFile::Sharing::kPrivate));
  Writer writer(archive_write_new());
  if (!writer.valid()) return MakeError(ErrorKind::kNoSpace, "libarchive: cannot allocate a writer");
  // pax where a name needs it (long paths), plain ustar otherwise: every tar reads it.
  if (archive_write_set_format_pax_restricted(writer.get()) != ARCHIVE_OK ||
      archive_write_add_filter_none(writer.get()) != ARCHIVE_OK ||
      archive_write_open_fd(writer.get(), out.fd()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kIo, "{}: cannot start a tar: {}", output, archive_error_string(writer.get()));
  }
  // The manifest names the files: readable by those who may read them all.
  bool world_readable = true;
  for (const Member& member : members) {
    if (member.planned.st_ino != 0 && (member.planned.st_mode & S_IROTH) == 0) world_readable = false;
  }
  HVPROF_TRYV(AddText(writer.get(), kManifestFile, manifest.dump(2) + "\n", output, world_readable ? 0644 : 0600));
  Progress progress("hvprof archive: files written", members.size());
  sym::Symbolizer checker;
  for (const Member& member : members) {
    HVPROF_TRYV(AddMember(writer.get(), member, output, checker, &summary.bytes, &world_readable));
    progress.Advance();
  }
  progress.Done();
  summary.files = members.size() + 1;
  if (archive_write_close(writer.get()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kIo, "{}: cannot finish the tar: {}", output, archive_error_string(writer.get()));
  }
  if (world_readable) HVPROF_TRYV(out.AllowSharing());
  HVPROF_TRYV(out.Commit());
  return summary;
}

}  // namespace hvprof::archive
