// Small helpers the engine uses instead of the C and C++ libraries, which it must not include.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvpmu::detail {

template <typename T>
constexpr T Min(T a, T b) { return a < b ? a : b; }
template <typename T>
constexpr T Max(T a, T b) { return a < b ? b : a; }

constexpr bool StrEqual(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// Copies at most size - 1 characters and always terminates (like strlcpy).
inline void StrCopy(char* dst, const char* src, size_t size) {
  size_t i = 0;
  for (; i + 1 < size && src[i] != '\0'; ++i) dst[i] = src[i];
  if (size != 0) dst[i] = '\0';
}

inline void Zero(void* p, size_t bytes) { __builtin_memset(p, 0, bytes); }

constexpr bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

constexpr uint32_t RoundUpPowerOfTwo(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Relaxed accessors for values one side writes while another reads (statistics, routing).
template <typename T>
inline T LoadRelaxed(const T* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
template <typename T>
inline void StoreRelaxed(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
template <typename T>
inline T LoadAcquire(const T* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
template <typename T>
inline void StoreRelease(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

}  // namespace hvpmu::detail
