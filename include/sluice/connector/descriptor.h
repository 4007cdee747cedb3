// sluice/connector/descriptor.h
//
// What a consumer needs to fetch a published payload, small enough for a
// queue message (a few hundred bytes): request id, kind, dtype, shape,
// chunk layout, mode, location and lease. Binary form: a 20-byte header
// (magic, version, length, XXH3-64 checksum of the body) and a protobuf
// body; a JSON form carries the same fields for logs and HTTP APIs.

#ifndef SLUICE_CONNECTOR_DESCRIPTOR_H_
#define SLUICE_CONNECTOR_DESCRIPTOR_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/connector/tensor.h"
#include "sluice/status.h"

namespace sluice {

enum class TransferMode : std::uint8_t { kAuto, kP2p, kStore };
// "auto", "p2p", "store". Errors: kInvalidArgument naming the input.
Result<TransferMode> ParseTransferMode(std::string_view s);
std::string_view TransferModeName(TransferMode m);

enum class PayloadKind : std::uint8_t {
  kEmbedding,
  kLatent,
  kCheckpoint,
  kFeature,
  kImage,
  kVideo
};
// "embedding", "latent", "checkpoint", "feature", "image", "video".
Result<PayloadKind> ParsePayloadKind(std::string_view s);
std::string_view PayloadKindName(PayloadKind k);

// How long a published payload lives.
struct Lease {
  enum class Kind : std::uint8_t {
    kDeleteOnConsume,  // Gone once its consumer has read it (or released it).
    kTtl,              // Gone `ttl` after publishing.
    kCache,            // Evictable under memory pressure.
    kPinned,           // Kept until removed (store mode: evicted last).
  };
  Kind kind = Kind::kDeleteOnConsume;
  std::chrono::seconds ttl{0};

  // "delete_on_consume", "ttl:SECONDS" (1..30 days), "cache", "pinned".
  // Errors: kInvalidArgument naming the input.
  static Result<Lease> Parse(std::string_view s);
  std::string ToString() const;
  friend bool operator==(const Lease&, const Lease&) = default;
};

struct PayloadDescriptor {
  // 2: `one_object` (a reader of version 1 would look for per-chunk keys).
  // 3: `memory` and `device` (a payload published from device memory).
  // Encode writes the oldest version that holds the fields in use, so a
  // host payload still reaches consumers that read only version 2.
  static constexpr std::uint16_t kVersion = 3;

  std::string request_id;
  PayloadKind kind = PayloadKind::kLatent;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // Row-major, in elements: the layout on the wire.
  int chunk_dim = -1;                 // -1: not chunked.
  int num_chunks = 1;
  TransferMode mode = TransferMode::kStore;  // kP2p or kStore, never kAuto.
  Lease lease;
  // p2p: where the producer's buffer is.
  std::string producer_endpoint;
  std::uint64_t region_key = 0;
  std::uint64_t region_offset = 0;  // Of the tensor's first byte in the region.
  std::uint64_t payload_id = 0;     // Names the payload in the producer's messages.
  // store: chunk i is the object "<key_prefix>/<i>", or with `one_object`
  // every chunk is in "<key_prefix>/all", chunk after chunk (each chunk's
  // runs back to back), read with one lookup.
  std::string key_prefix;
  bool one_object = false;
  // Every chunk existed at publish (not progressive): p2p consumers read at
  // once instead of waiting for readiness messages.
  bool complete = false;
  // Where the producer's tensor lives (TensorView::memory / device): a
  // consumer may size and place its destination from it. The payload can be
  // consumed into either kind whatever this says.
  MemoryKind memory = MemoryKind::kHost;
  int device = -1;

  // The version Encode and ToJson write: 3 with device memory, else 2.
  std::uint16_t version() const;

  std::uint64_t nbytes() const;
  // Store mode: the key of the store object holding chunk `i`
  // ("<key_prefix>/<i>", or "<key_prefix>/all" with one_object).
  std::string StoreKey(int i) const;
  // Store mode: every object holding the payload, in chunk order; empty in
  // p2p mode. For releasing a payload without reading it.
  std::vector<std::string> StoreKeys() const;
  // Field-by-field consistency (rank, chunking, mode and location).
  // Errors: kInvalidArgument naming the field.
  Status Validate() const;

  std::string Encode() const;
  // Errors: kInvalidArgument ("truncated", "checksum mismatch", "not a
  // descriptor", an invalid field) or kFailedPrecondition for a descriptor
  // of a newer version than this build reads.
  static Result<PayloadDescriptor> Decode(std::string_view bytes);
  std::string ToJson() const;
  static Result<PayloadDescriptor> FromJson(std::string_view json);
};

}  // namespace sluice

#endif  // SLUICE_CONNECTOR_DESCRIPTOR_H_
