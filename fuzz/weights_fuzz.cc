// The reference models' weights file (safetensors, WeightsFile::Parse) as a
// user or a corrupted download hands it over. Whatever the bytes, Parse
// answers a Status; a file it accepts holds only tensors whose bytes lie
// inside the file, whose shapes match their byte counts and whose values
// are finite, and checking it against the architecture answers a Status.
// The same bytes as a LoRA adapter (Adapter::Parse): refused with
// kInvalidArgument, or an adapter of a rank in range named by a digest.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/reference/adapter.h"
#include "runtime/reference/models.h"
#include "runtime/reference/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using sluice::reference::WeightsFile;
  const std::string bytes_in(reinterpret_cast<const char*>(data), size);
  auto adapter = sluice::reference::Adapter::Parse(bytes_in);
  if (adapter.ok()
          ? ((*adapter)->rank() < 1 || (*adapter)->rank() > sluice::reference::kMaxAdapterRank ||
             (*adapter)->digest().size() != 16)
          : adapter.status().code() != sluice::StatusCode::kInvalidArgument) {
    std::abort();
  }
  auto w = WeightsFile::Parse(bytes_in);
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
