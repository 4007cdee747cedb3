// A connector payload descriptor as a producer sends it, in its binary form
// (the connector's control messages) and as JSON (Python, HTTP). One that
// decodes validates, and encodes back to one that decodes equal.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sluice/connector/descriptor.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto d = (data[0] & 1) != 0 ? sluice::PayloadDescriptor::FromJson(in)
                              : sluice::PayloadDescriptor::Decode(in);
  if (!d.ok()) {
    return 0;
  }
  if (!d->Validate().ok()) {
    std::abort();  // Decode and FromJson hand out only valid descriptors.
  }
  auto binary = sluice::PayloadDescriptor::Decode(d->Encode());
  auto json = sluice::PayloadDescriptor::FromJson(d->ToJson());
  if (!binary.ok() || !json.ok() || binary->Encode() != d->Encode() ||
      json->Encode() != d->Encode()) {
    std::abort();
  }
  return 0;
}
