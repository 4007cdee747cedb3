// The reference models' weights file (safetensors, WeightsFile::Parse) as a
// user or a corrupted download hands it over. Whatever the bytes, Parse
// answers a Status; a file it accepts holds only tensors whose bytes lie
// inside the file, whose shapes match their byte counts and whose values
// are finite, and checking it against the architecture answers a Status.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/reference/models.h"
#include "runtime/reference/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using sluice::reference::WeightsFile;
  auto w = WeightsFile::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!w.ok()) {
    if (w.status().code() != sluice::StatusCode::kInvalidArgument) {
      std::abort();
    }
    return 0;
  }
  std::size_t bytes = 0;
  for (const auto& spec : sluice::reference::ReferenceArchitecture()) {
    (void)(*w)->Find(spec.name);
  }
  (void)(*w)->Check(sluice::reference::ReferenceArchitecture());
  for (const auto& [key, value] : (*w)->metadata()) {
    bytes += key.size() + value.size();
  }
  if (bytes > size) {
    std::abort();  // Metadata cannot outgrow the file it came from.
  }
  return 0;
}
