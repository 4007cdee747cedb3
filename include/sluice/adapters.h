// sluice/adapters.h
//
// What a request may ask of LoRA adapters ("lora": [{"name", "scale"}]),
// checked alike by the orchestrator (the client's request) and the workers
// (the request as the orchestrator forwards it, with each adapter's
// "digest"), and where a registered adapter's file is kept in the store.
#ifndef SLUICE_ADAPTERS_H_
#define SLUICE_ADAPTERS_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice {

// What a deployment learns of an adapter file when it is registered (the
// model's check: e.g. CheckReferenceAdapter): its digest (what workers
// load it by and checkpoint keys name), rank and size.
struct AdapterFacts {
  std::string digest;
  int rank = 0;
  std::size_t bytes = 0;
};

inline constexpr int kMaxAdaptersPerRequest = 4;
// A request's scale of an adapter is in [-kMaxAdapterScale, kMaxAdapterScale].
inline constexpr double kMaxAdapterScale = 4.0;
inline constexpr std::size_t kMaxAdapterNameBytes = 64;

// 1..kMaxAdapterNameBytes of ASCII letters, digits, '-', '_' and '.', not
// starting with '.'.
bool ValidAdapterName(std::string_view name);
// A digest as adapters name themselves: 16 lower-case hex digits.
bool ValidAdapterDigest(std::string_view digest);
// The store key of the adapter file whose digest is `digest`.
std::string AdapterStoreKey(std::string_view digest);

// The worker label, and a job's affinity, of an adapter: this prefix and
// its digest (a denoise worker that holds the adapter carries it).
inline constexpr std::string_view kAdapterLabelPrefix = "adapter=";

}  // namespace sluice

#endif  // SLUICE_ADAPTERS_H_
