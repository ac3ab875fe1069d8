// The process table on a fake /proc and synthetic side-band records: domains through fork
// and cgroups, exec and exit, mappings, bias and build-ids, vCPU threads, context JSON.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/symbolizer/symbolizer.h"
#include "hvprof/linux/elf_info.h"
#include "hvprof/linux/process_table.h"
#include "hvprof/store/context_file.h"
#include "temp_dir.h"

using namespace hvprof::linux_host;
using hvprof::testing::TempDir;

namespace {

// A /proc with the files the table reads.
class FakeProc {
 public:
  void Add(uint32_t pid, uint32_t ppid, const std::string& comm, const std::string& cgroup = "/",
           const std::string& maps = "", uint64_t start_ticks = 1000) {
    const std::string dir = Dir(pid);
    std::filesystem::create_directories(dir);
    Write(dir + "/stat", fmt::format("{} ({}) S {} {} {} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 {} "
                                     "1000 100\n",
                                     pid, comm, ppid, pid, pid, start_ticks));
    Write(dir + "/comm", comm + "\n");
    Write(dir + "/cgroup", "1:memory:/\n0::" + cgroup + "\n");
    Write(dir + "/maps", maps);
  }
  void Thread(uint32_t pid, uint32_t tid, const std::string& comm) {
    const std::string dir = fmt::format("{}/task/{}", Dir(pid), tid);
    std::filesystem::create_directories(dir);
    Write(dir + "/comm", comm + "\n");
  }
  void Cgroup(uint32_t pid, const std::string& cgroup) {
    std::filesystem::create_directories(Dir(pid));
    Write(Dir(pid) + "/cgroup", "0::" + cgroup + "\n");
  }
  const std::string& root() const { return dir_.path(); }

 private:
  std::string Dir(uint32_t pid) const { return fmt::format("{}/{}", dir_.path(), pid); }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  TempDir dir_;
};

PerfTask Fork(uint32_t pid, uint32_t ppid, uint32_t tid = 0, uint64_t time = 0) {
  PerfTask task;
  task.fork = true;
  task.pid = pid;
  task.ppid = ppid;
  task.tid = tid != 0 ? tid : pid;
  task.ptid = ppid;
  task.time = time;
  return task;
}

// The exit of process `pid`, or of its thread `tid`.
PerfTask Exit(uint32_t pid, uint64_t time = 0, uint32_t tid = 0) {
  PerfTask task;
  task.pid = pid;
  task.ppid = pid;
  task.tid = tid != 0 ? tid : pid;
  task.ptid = pid;
  task.time = time;
  return task;
}

PerfMmap2 Mmap(uint32_t pid, uint64_t start, uint64_t len, uint64_t pgoff, std::string_view path,
               const std::string& build_id = "") {
  PerfMmap2 record;
  record.pid = pid;
  record.tid = pid;
  record.addr = start;
  record.len = len;
  record.pgoff = pgoff;
  record.filename = path;
  record.build_id = build_id;
  record.prot = 5;
  return record;
}

PerfComm Comm(uint32_t pid, uint32_t tid, std::string_view comm, bool exec) {
  PerfComm record;
  record.pid = pid;
  record.tid = tid;
  record.comm = comm;
  record.exec = exec;
  return record;
}

DomainMap Map(const char* text) {
  auto map = ParseDomainMap(text);
  REQUIRE(map.has_value());
  return map.value();
}

}  // namespace

TEST_CASE("process trees and cgroups get their domains", "[linux][processes]") {
  FakeProc proc;
  proc.Add(1, 0, "init");
  proc.Add(100, 1, "tree-root");
  proc.Add(200, 1, "vm", "/vms/b/x");
  proc.Add(161, 100, "middle");
  proc.Add(160, 161, "leaf");
  DomainRegistry registry(Map("pid:100=1,cgroup:/vms/b=2"), 2, true);
  ProcessTable table(registry, {proc.root(), false});
  table.ScanProc();
  CHECK(table.Find(1)->domain == 0);
  CHECK(table.Find(100)->domain == 1);
  CHECK(table.Find(200)->domain == 2);
  CHECK(table.Find(161)->domain == 1);  // below the root, found by ancestry
  CHECK(table.Find(160)->domain == 1);

  // Children gone before we read /proc inherit; a pid: tree beats a cgroup rule.
  table.OnTask(Fork(101, 100));
  table.OnTask(Fork(102, 101));
  proc.Cgroup(104, "/vms/b");
  table.OnTask(Fork(104, 100));
  proc.Cgroup(201, "/vms/b");
  table.OnTask(Fork(201, 1));
  table.OnTask(Fork(202, 200));
  proc.Cgroup(300, "/");
  table.OnTask(Fork(300, 200));  // moved out of the VM's cgroup
  CHECK(table.Find(101)->domain == 1);
  CHECK(table.Find(102)->domain == 1);
  CHECK(table.Find(104)->domain == 1);
  CHECK(table.Find(201)->domain == 2);
  CHECK(table.Find(202)->domain == 2);
  CHECK(table.Find(300)->domain == 0);

  // A new thread is not a new process.
  table.OnTask(Fork(100, 100, 105));
  CHECK(table.Find(105) == nullptr);
  CHECK(table.Find(100)->threads.count(105) == 1);

  // Discovered from /proc when first sampled, through ancestors the table never saw.
  proc.Add(171, 100, "late-parent");
  proc.Add(170, 171, "late-child");
  CHECK(table.Get(170).domain == 1);
  CHECK(table.Find(171)->domain == 1);
  // Gone and never seen: dom0, and a stub is kept so /proc is not read again.
  CHECK(table.Get(999).domain == 0);
  CHECK(table.stats().proc_discoveries == 3);

  // An exited process keeps its entry and its domain.
  table.OnTask(Exit(101));
  REQUIRE(table.Find(101) != nullptr);
  CHECK(table.Find(101)->exited);
  CHECK(table.Find(101)->domain == 1);
}

TEST_CASE("a long session forgets what exited, and its context went out as events", "[linux][processes]") {
  FakeProc proc;
  proc.Add(1, 0, "init");
  proc.Add(500, 1, "vmm");
  DomainRegistry registry(Map("pid:500=1"), 2, true);
  ProcessTable table(registry, {proc.root(), false});
  table.ScanProc();
  const ProcessTableStats at_start = table.stats();

  // A build: thousands of short processes under the rule's process, each with a thread; a
  // long-lived server whose worker threads come and go.
  table.OnTask(Fork(600, 1, 0, 10));
  for (uint32_t i = 0; i < 3000; ++i) {
    const uint32_t pid = 1000 + 2 * i, tid = pid + 1;
    const uint64_t time = 100 + i;
    table.OnTask(Fork(pid, 500, 0, time));
    table.OnTask(Fork(pid, pid, tid, time));
    PerfMmap2 mapped = Mmap(pid, 0x555555555000, 0x2000, 0x1000, "/usr/bin/cc1");
    mapped.sid.time = time;
    table.OnMmap2(mapped);
    table.OnTask(Exit(pid, time + 1, tid));
    table.OnTask(Exit(pid, time + 2));
    table.OnTask(Fork(600, 600, 20000 + i, time));
    table.OnTask(Exit(600, time + 1, 20000 + i));
  }
  CHECK(table.stats().processes == at_start.processes + 3001);
  CHECK(table.TgidOf(1001) == 1000);  // from its FORK record

  // Records up to time 5000 may still come: nothing that exited after it is forgotten.
  table.Prune(1100);
  CHECK(table.Find(1000 + 2 * 500) == nullptr);   // exited at 602
  REQUIRE(table.Find(1000 + 2 * 1500) != nullptr);  // exited at 1602
  CHECK(table.TgidOf(1000 + 2 * 1500 + 1) == 1000 + 2 * 1500);

  table.Prune(5000);
  const ProcessTableStats pruned = table.stats();
  // Every exited process is gone (sampled or not: the agent has its context); the server stays.
  CHECK(pruned.processes == at_start.processes + 1);
  CHECK(pruned.mappings == at_start.mappings);
  CHECK(table.Find(600) != nullptr);
  // Which process each exited thread was in is forgotten too: only the live ones' stay.
  CHECK(pruned.threads == at_start.threads + 1);
  // Their context went out as events: each process's birth, mapping and exit, with the domain
  // its rule gave it and the times of its records.
  const ProcessTable::Events events = table.TakeEvents(1, SIZE_MAX);
  uint64_t born = 0, mapped = 0, exited = 0;
  for (const hvprof::context::ContextEvent& event : events.events) {
    if (event.pid < 1000 || event.pid >= 7000) continue;
    CHECK(event.domain == 1);
    born += event.kind == hvprof::context::ContextKind::kProcess;
    mapped += event.kind == hvprof::context::ContextKind::kMapping && event.path == "/usr/bin/cc1";
    exited += event.kind == hvprof::context::ContextKind::kExit;
  }
  CHECK(born == 3000);
  CHECK(mapped == 3000);
  CHECK(exited == 3000);
  CHECK_FALSE(events.more);
  // In bounded batches, each but the last says more are waiting; together they are the same.
  uint64_t from = 1, batches = 0, batched = 0;
  for (bool more = true; more; ++batches) {
    const ProcessTable::Events batch = table.TakeEvents(from, 1000);
    CHECK(batch.first == from);
    CHECK(batch.more == (batch.next < events.next));
    if (batch.more) CHECK(batch.events.size() == 1000);
    batched += batch.events.size();
    from = batch.next;
    more = batch.more;
  }
  CHECK(batched == events.events.size());
  CHECK(batches == (events.events.size() + 999) / 1000);
  // Starting over with a bound that what is alive already fills: the reply still moves on from
  // 0 and says more, so an agent goes on to the kept events instead of starting over again.
  const ProcessTable::Events start = table.TakeEvents(0, 1);
  CHECK(start.events.size() > 1);
  CHECK(start.next == 1);
  CHECK(start.more);
  CHECK(table.TakeEvents(start.next, SIZE_MAX).events.size() == events.events.size());
  // Once the agent has them, they are not kept.
  table.Acknowledge(events.next);
  CHECK(table.stats().context_pending == 0);

  // A pid seen again is a new process, read from /proc (here: gone, so dom0).
  CHECK(table.Get(1016).domain == 0);
  // A thread that exited and was forgotten is its own process to TgidOf (/proc has no entry).
  CHECK(table.TgidOf(1017) == 1017);

  // A tid reused by another process before the prune keeps its new owner.
  table.OnTask(Fork(7000, 1, 0, 6000));
  table.OnTask(Fork(7000, 7000, 7001, 6000));
  table.OnTask(Exit(7000, 6001, 7001));
  table.OnTask(Fork(7100, 1, 0, 6002));
  table.OnTask(Fork(7100, 7100, 7001, 6002));
  table.Prune(7000);
  CHECK(table.TgidOf(7001) == 7100);
}

TEST_CASE("scheduled tasks are named per process: a reused tid is another task", "[linux][processes]") {
  FakeProc proc;
  proc.Add(1, 0, "init");
  DomainRegistry registry(Map(""), 2, true);
  ProcessTable table(registry, {proc.root(), false});
  table.ScanProc();

  table.OnTask(Fork(100, 1, 0, 10));
  table.OnTask(Fork(100, 100, 105, 11));
  table.OnComm(Comm(100, 105, "old-worker", false));
  table.NoteTask(100, 105);
  table.OnTask(Exit(100, 20, 105));
  table.OnTask(Exit(100, 21));
  // The host hands tid 105 to a thread of another process, which renames itself.
  table.OnTask(Fork(200, 1, 0, 30));
  table.OnTask(Fork(200, 200, 105, 31));
  table.OnComm(Comm(200, 105, "new-worker", false));
  table.NoteTask(200, 105);
  table.OnComm(Comm(200, 105, "renamed", false));

  // The events name each task as it was when first named.
  std::vector<std::string> named;
  for (const hvprof::context::ContextEvent& event : table.TakeEvents(1, SIZE_MAX).events) {
    if (event.kind == hvprof::context::ContextKind::kTask) named.push_back(fmt::format("{}/{} {}", event.pid, event.tid, event.comm));
  }
  CHECK(named == std::vector<std::string>{"100/105 old-worker", "200/105 new-worker"});
  // A new agent is told what is known now: each task by its latest name, the exited one too.
  table.Acknowledge(UINT64_MAX);
  std::set<std::string> now;
  for (const hvprof::context::ContextEvent& event : table.TakeEvents(0, SIZE_MAX).events) {
    if (event.kind == hvprof::context::ContextKind::kTask) now.insert(fmt::format("{}/{} {}", event.pid, event.tid, event.comm));
  }
  CHECK(now == std::set<std::string>{"100/105 old-worker", "200/105 renamed"});
}

TEST_CASE("context: a process's events tell exec'd images and reused pids apart by time", "[linux][processes]") {
  FakeProc proc;
  proc.Add(1, 0, "init");
  DomainRegistry registry(Map("pid:500=1"), 2, true);
  ProcessTable table(registry, {proc.root(), false});
  table.ScanProc();
  auto mmap_at = [&](uint32_t pid, uint64_t start, uint64_t len, uint64_t pgoff, std::string_view path,
                     const std::string& build_id, uint64_t time) {
    PerfMmap2 record = Mmap(pid, start, len, pgoff, path, build_id);
    record.sid.time = time;
    table.OnMmap2(record);
  };
  auto comm_at = [&](uint32_t pid, std::string_view comm, bool exec, uint64_t time) {
    PerfComm record = Comm(pid, pid, comm, exec);
    record.sid.time = time;
    table.OnComm(record);
  };

  table.OnTask(Fork(40, 1, 0, 100));
  comm_at(40, "worker", true, 110);
  mmap_at(40, 0x555555555000, 0x2000, 0x1000, "/usr/bin/worker", "ab12", 120);
  mmap_at(40, 0x7f0000001000, 0x10000, 0x1000, "/usr/lib/libc.so.6", "", 130);
  mmap_at(40, 0x7f0000100000, 0x1000, 0, "//anon", "", 140);  // not a file: not told
  table.OnTask(Exit(40, 1000));
  // The pid again, and an exec: new processes from their records' times.
  table.OnTask(Fork(40, 1, 0, 2000));
  comm_at(40, "shell", true, 2010);
  mmap_at(40, 0x555555555000, 0x1000, 0x1000, "/usr/bin/sh", "", 2020);
  comm_at(40, "prog", true, 3000);
  mmap_at(40, 0x555555556000, 0x1000, 0x1000, "/usr/bin/prog", "", 3010);

  hvprof::store::ContextIndex index;
  for (const hvprof::context::ContextEvent& event : table.TakeEvents(1, SIZE_MAX).events) index.Apply(event);
  auto image_at = [&](uint64_t time, uint64_t ip) -> std::string {
    const auto resolved = index.Resolve(0, 40, time, ip);
    return resolved ? index.image(resolved->image)->path : std::string("(none)");
  };
  CHECK(image_at(500, 0x555555555800) == "/usr/bin/worker");
  CHECK(index.Resolve(0, 40, 500, 0x555555555800)->address == 0x555555555800 - 0x555555554000);  // start - pgoff
  CHECK(index.image(index.Resolve(0, 40, 500, 0x555555555800)->image)->build_id == "ab12");
  CHECK(image_at(500, 0x7f0000002000) == "/usr/lib/libc.so.6");
  CHECK(image_at(500, 0x7f0000100100) == "(none)");
  CHECK(image_at(2500, 0x555555555800) == "/usr/bin/sh");
  CHECK(image_at(2500, 0x7f0000002000) == "(none)");  // the fork's parent (init) has no libc here
  CHECK(image_at(3500, 0x555555556800) == "/usr/bin/prog");
  CHECK(*index.Comm(0, 40, 500) == "worker");
  CHECK(*index.Comm(0, 40, 2500) == "shell");
  CHECK(*index.Comm(0, 40, 3500) == "prog");

  // The live table holds the latest process only, with the mappings of its latest image.
  const auto* live = table.Find(40);
  REQUIRE(live != nullptr);
  CHECK(live->comm == "prog");
  CHECK(live->domain == 0);
  REQUIRE_FALSE(live->mappings.empty());
  CHECK(live->mappings.back().path == "/usr/bin/prog");
}

TEST_CASE("mappings: fork copies them, a new mapping replaces what it overlaps",
          "[linux][processes]") {
  FakeProc proc;
  DomainRegistry registry(DomainMap{}, 2, true);
  ProcessTable table(registry, {proc.root(), false});
  table.OnMmap2(Mmap(10, 0x1000, 0x3000, 0, "/a"));
  table.OnMmap2(Mmap(10, 0x2000, 0x1000, 0x5000, "/b"));
  const auto& mappings = table.Find(10)->mappings;
  REQUIRE(mappings.size() == 3);
  CHECK(mappings[0].path == "/a");
  CHECK(mappings[0].end == 0x2000);
  CHECK(mappings[1].path == "/b");
  CHECK(mappings[2].path == "/a");
  CHECK(mappings[2].start == 0x3000);
  CHECK(mappings[2].pgoff == 0x2000);
  CHECK(mappings[2].bias == mappings[0].bias);  // same file, same load bias

  table.OnTask(Fork(11, 10));
  REQUIRE(table.Find(11) != nullptr);
  CHECK(table.Find(11)->mappings.size() == 3);
}

TEST_CASE("bias and build-id from the fixture binary symbolize it", "[linux][processes]") {
  const std::string path = HVPROF_LINUX_HOTSPOTS;
  auto info = ReadElfInfo(path);
  REQUIRE(info.has_value());
  CHECK(info.value().build_id.size() == 40);  // GNU ld's default sha1

  hvprof::symbolizer::Symbolizer symbolizer;
  auto functions = symbolizer.ListFunctions(hvprof::symbolizer::ImageSpec::Elf(path));
  REQUIRE(functions.has_value());
  uint64_t hot = 0;
  for (const auto& function : functions.value()) {
    if (function.name == "hot_thirty") hot = function.start;
  }
  REQUIRE(hot != 0);
  const ElfLoad* text = nullptr;
  for (const ElfLoad& load : info.value().loads) {
    if (hot >= load.vaddr && hot < load.vaddr + load.memsz) text = &load;
  }
  REQUIRE(text != nullptr);

  // Map the text segment the way ld.so would, at a PIE base.
  const uint64_t base = 0x7f1200000000;
  const uint64_t start = base + (text->vaddr & ~uint64_t{0xFFF});
  const uint64_t pgoff = text->offset & ~uint64_t{0xFFF};
  FakeProc proc;
  DomainRegistry registry(DomainMap{}, 2, true);
  ProcessTable table(registry, {proc.root(), true});
  table.OnMmap2(Mmap(77, start, text->memsz + 0x1000, pgoff, path));
  // The file is read off this thread; the answer is taken when asked for.
  REQUIRE(table.SettleImages(std::chrono::seconds(60)));
  REQUIRE(table.Find(77)->mappings.size() == 1);
  const Mapping& mapping = table.Find(77)->mappings[0];
  CHECK(mapping.bias == base);
  CHECK(mapping.build_id == info.value().build_id);

  auto spec = hvprof::symbolizer::ImageSpec::Elf(path, mapping.bias);
  spec.expected_build_id = mapping.build_id;
  const uint64_t runtime[] = {base + hot + 4};
  auto batch = symbolizer.Symbolize(spec, runtime,
                                    hvprof::symbolizer::LookupOptions::With(
                                        hvprof::symbolizer::Detail::kFunctions));
  REQUIRE(batch.has_value());
  REQUIRE(batch.value()[0].resolved());
  CHECK(batch.value()[0].frames.back().function == "hot_thirty");

  // A file we cannot read keeps the record's build-id and the usual bias.
  table.OnMmap2(Mmap(78, 0x400000, 0x1000, 0, "/nonexistent/binary", "feed"));
  REQUIRE(table.SettleImages(std::chrono::seconds(60)));
  CHECK(table.Find(78)->mappings[0].build_id == "feed");
  CHECK(table.Find(78)->mappings[0].bias == 0x400000);
  CHECK(table.stats().elf_failures == 1);
}

TEST_CASE("a file read late is told again as of its mapping and only to the mappings of that file", "[linux][processes]") {
  // Two files at one path, one after the other (a program rebuilt in place, or a non-PIE program
  // of two containers): each mapping gets its own file's build-id and bias, matched by the file's
  // key, whatever order the answers come in.
  const std::string first = HVPROF_LINUX_HOTSPOTS;
  const std::string second = "/bin/true";
  auto first_info = ReadElfInfo(first);
  auto second_info = ReadElfInfo(second);
  REQUIRE(first_info.has_value());
  REQUIRE(second_info.has_value());
  REQUIRE(first_info.value().build_id != second_info.value().build_id);
  TempDir dir;
  const std::string path = dir.File("program");
  std::filesystem::copy_file(first, path);
  FakeProc proc;
  DomainRegistry registry(DomainMap{}, 2, true);
  ProcessTable table(registry, {proc.root(), true});
  const uint64_t start = 0x400000;
  PerfMmap2 one = Mmap(20, start, 0x1000, 0, path);
  one.ino = 1;
  one.sid.time = 1000;
  table.OnMmap2(one);
  // Its answer is read, not taken, when the path changes file.
  REQUIRE(table.WaitForImages(std::chrono::seconds(60)));
  std::filesystem::copy_file(second, path + ".new");
  std::filesystem::rename(path + ".new", path);
  PerfMmap2 two = Mmap(21, start, 0x1000, 0, path);
  two.ino = 2;
  two.sid.time = 2000;
  table.OnMmap2(two);
  // Both were told at once with the usual guess.
  const auto told = table.TakeEvents(0, 1000);
  REQUIRE(table.SettleImages(std::chrono::seconds(60)));
  CHECK(table.Find(20)->mappings[0].build_id == first_info.value().build_id);
  CHECK(table.Find(21)->mappings[0].build_id == second_info.value().build_id);
  CHECK(table.Find(20)->mappings[0].awaiting.empty());

  // The answers went out as events, as of each mapping's time, and take the guesses' places.
  hvprof::store::ContextIndex index;
  for (const auto& event : told.events) index.Apply(event);
  const auto later = table.TakeEvents(told.next, 1000);
  size_t corrections = 0;
  for (const auto& event : later.events) {
    if (event.kind != hvprof::context::ContextKind::kMapping) continue;
    ++corrections;
    CHECK(event.time_ns == (event.pid == 20 ? 1000u : 2000u));
    CHECK(event.build_id == (event.pid == 20 ? first_info.value().build_id : second_info.value().build_id));
    index.Apply(event);
  }
  CHECK(corrections == 2);
  for (uint32_t pid : {20u, 21u}) {
    const Mapping& mapping = table.Find(pid)->mappings[0];
    auto resolved = index.Resolve(0, pid, pid == 20 ? 1500 : 2500, start + 0x10);
    REQUIRE(resolved.has_value());
    CHECK(resolved->address == start + 0x10 - mapping.bias);
    CHECK(index.image(resolved->image)->build_id == mapping.build_id);
  }
}

TEST_CASE("vCPU threads are known by name, or numbered", "[linux][processes]") {
  CHECK(ProcessTable::ParseVcpuName("CPU 3/KVM") == 3);
  CHECK(ProcessTable::ParseVcpuName("fc_vcpu 1") == 1);
  CHECK(ProcessTable::ParseVcpuName("vcpu12") == 12);
  CHECK(ProcessTable::ParseVcpuName("crosvm_vcpu2") == 2);
  CHECK(ProcessTable::ParseVcpuName("qemu-system-x86") == -1);
  CHECK(ProcessTable::ParseVcpuName("worker") == -1);
  CHECK(ProcessTable::ParseVcpuName("CPU 999/KVM") == -1);  // above kMaxVcpus

  FakeProc proc;
  proc.Add(300, 1, "qemu-system-x86");
  proc.Thread(300, 302, "CPU 1/KVM");
  proc.Thread(300, 303, "worker");
  DomainRegistry registry(Map("kvm:300=2"), 2, true);
  ProcessTable table(registry, {proc.root(), false});
  table.OnComm(Comm(300, 301, "CPU 0/KVM", false));
  CHECK(table.IsVcpuThread(300, 301));
  CHECK(table.VcpuOf(300, 301) == 0);
  CHECK(table.IsVcpuThread(300, 302));  // its name read from /proc
  CHECK(table.VcpuOf(300, 302) == 1);
  CHECK_FALSE(table.IsVcpuThread(300, 303));
  // A thread without a vCPU name that ran guest code gets the first free number.
  CHECK(table.VcpuOf(300, 303) == 2);
  CHECK(table.IsVcpuThread(300, 303));
  CHECK(table.Find(300)->comm == "qemu-system-x86");
}
