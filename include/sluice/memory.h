// sluice/memory.h
//
// Vocabulary for memory that sluice moves: where it lives (host or device)
// and what remote peers may do with it once registered.

#ifndef SLUICE_MEMORY_H_
#define SLUICE_MEMORY_H_

#include <cstdint>
#include <string_view>

namespace sluice {

enum class MemoryKind : std::uint8_t {
  kHost = 0,    // CPU memory of this process.
  kDevice = 1,  // CUDA device memory (needs a device-capable transport).
};

// What remote peers may do to a registered region. Every region can be the
// local source or destination of this process's own ops; kLocalOnly keeps it
// out of the table that peers see.
enum class Access : std::uint8_t {
  kLocalOnly = 0,
  kRemoteRead = 1,
  kRemoteWrite = 2,
  kRemoteReadWrite = 3,
};

inline bool AllowsRemoteRead(Access a) {
  return (static_cast<std::uint8_t>(a) & 1u) != 0;
}
inline bool AllowsRemoteWrite(Access a) {
  return (static_cast<std::uint8_t>(a) & 2u) != 0;
}

// "local", "read", "write", "rw".
std::string_view AccessName(Access a);

}  // namespace sluice

#endif  // SLUICE_MEMORY_H_
