// A move-only owner for a non-pointer handle (an fd, an Elf*, a Dwarf*...). There is no default
// deleter on purpose: each alias names its own release function and its invalid value.
#pragma once

#include <utility>

namespace hvprof {

template <typename Handle, auto kReleaseFn, Handle kInvalid>
class UniqueResource {
 public:
  UniqueResource() = default;
  explicit UniqueResource(Handle handle) : handle_(handle) {}
  ~UniqueResource() { Reset(); }

  UniqueResource(UniqueResource&& other) noexcept : handle_(other.Release()) {}
  UniqueResource& operator=(UniqueResource&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueResource(const UniqueResource&) = delete;
  UniqueResource& operator=(const UniqueResource&) = delete;

  Handle get() const { return handle_; }
  bool valid() const { return handle_ != kInvalid; }

  // Gives up ownership without releasing.
  [[nodiscard]] Handle Release() { return std::exchange(handle_, kInvalid); }

  void Reset(Handle handle = kInvalid) {
    Handle old = std::exchange(handle_, handle);
    if (old != kInvalid) kReleaseFn(old);
  }

 private:
  Handle handle_ = kInvalid;
};

}  // namespace hvprof
