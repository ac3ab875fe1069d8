// A jitdump as perf's jitdump.h lays it out (little-endian, the writer's order), for tests of
// the parser and of reports on sessions with JIT code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "hvprof/symbolizer/jit_symbols.h"

namespace hvprof::testing {

class JitDumpWriter {
 public:
  explicit JitDumpWriter(uint32_t pid = 4242, uint64_t flags = 0) {
    Put<uint32_t>(symbolizer::kJitDumpMagic);
    Put<uint32_t>(1);   // version
    Put<uint32_t>(40);  // header size
    Put<uint32_t>(62);  // EM_X86_64
    Put<uint32_t>(0);
    Put<uint32_t>(pid);
    Put<uint64_t>(1000);
    Put<uint64_t>(flags);
  }
  void CodeLoad(uint64_t time, uint64_t address, uint64_t size, const std::string& name) {
    const size_t start = Begin(0, time);
    Put<uint32_t>(1);
    Put<uint32_t>(1);
    Put<uint64_t>(address);
    Put<uint64_t>(address);
    Put<uint64_t>(size);
    Put<uint64_t>(index_++);
    PutString(name);
    bytes_.resize(bytes_.size() + size, std::byte(0x90));  // the code
    End(start);
  }
  void CodeMove(uint64_t time, uint64_t from, uint64_t to, uint64_t size) {
    const size_t start = Begin(1, time);
    Put<uint32_t>(1);
    Put<uint32_t>(1);
    Put<uint64_t>(to);
    Put<uint64_t>(from);
    Put<uint64_t>(to);
    Put<uint64_t>(size);
    Put<uint64_t>(0);
    End(start);
  }
  void DebugInfo(uint64_t time, uint64_t address, const std::string& file, int32_t line) {
    const size_t start = Begin(2, time);
    Put<uint64_t>(address);
    Put<uint64_t>(1);
    Put<uint64_t>(address);
    Put<int32_t>(line);
    Put<int32_t>(0);
    PutString(file);
    End(start);
  }
  void Raw(uint32_t id, uint32_t total, uint64_t time) {
    Put<uint32_t>(id);
    Put<uint32_t>(total);
    Put<uint64_t>(time);
  }
  std::span<const std::byte> bytes() const { return {bytes_.data(), bytes_.size()}; }
  std::vector<std::byte>& data() { return bytes_; }

 private:
  template <typename T>
  void Put(T value) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof value);
    std::memcpy(bytes_.data() + at, &value, sizeof value);
  }
  void PutString(const std::string& text) {
    for (char c : text) bytes_.push_back(std::byte(c));
    bytes_.push_back(std::byte(0));
  }
  size_t Begin(uint32_t id, uint64_t time) {
    const size_t start = bytes_.size();
    Raw(id, 0, time);
    return start;
  }
  void End(size_t start) {
    const uint32_t total = static_cast<uint32_t>(bytes_.size() - start);
    std::memcpy(bytes_.data() + start + 4, &total, sizeof total);
  }
  std::vector<std::byte> bytes_;
  uint64_t index_ = 0;
};


}  // namespace hvprof::testing
