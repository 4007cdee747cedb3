#include "sluice/connector/descriptor.h"

#include <xxhash.h>

#include <array>
#include <charconv>
#include <nlohmann/json.hpp>

#include "proto/connector/v1/descriptor.pb.h"

namespace sluice {
namespace {

constexpr std::uint32_t kMagic = 0x53444C53;  // "SLDS" little-endian.
constexpr std::size_t kHeader = 20;           // magic, version, flags, body_len, xxh3-64.
constexpr std::size_t kMaxBody = 16 * 1024;
constexpr int kMaxChunks = 4096;

constexpr std::array<std::string_view, 3> kModes = {"auto", "p2p", "store"};
constexpr std::array<std::string_view, 6> kKinds = {"embedding", "latent", "checkpoint",
                                                    "feature",   "image",  "video"};

template <typename T, std::size_t N>
Result<T> ParseName(const std::array<std::string_view, N>& names, std::string_view s,
                    std::string_view what) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == s) {
      return static_cast<T>(i);
    }
  }
  std::string list;
  for (std::string_view n : names) {
    list += (list.empty() ? "" : ", ") + std::string(n);
  }
  return InvalidArgumentError("unknown " + std::string(what) + " '" + std::string(s) +
                              "' (expected " + list + ")");
}

void Put(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}
std::uint64_t Get(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return v;
}

}  // namespace

Result<TransferMode> ParseTransferMode(std::string_view s) {
  return ParseName<TransferMode>(kModes, s, "transfer mode");
}
std::string_view TransferModeName(TransferMode m) {
  return kModes[static_cast<std::size_t>(m)];
}
Result<PayloadKind> ParsePayloadKind(std::string_view s) {
  return ParseName<PayloadKind>(kKinds, s, "payload kind");
}
std::string_view PayloadKindName(PayloadKind k) {
  return kKinds[static_cast<std::size_t>(k)];
}

Result<Lease> Lease::Parse(std::string_view s) {
  if (s == "delete_on_consume") {
    return Lease{Kind::kDeleteOnConsume, {}};
  }
  if (s == "cache") {
    return Lease{Kind::kCache, {}};
  }
  if (s == "pinned") {
    return Lease{Kind::kPinned, {}};
  }
  if (s.starts_with("ttl:")) {
    std::string_view num = s.substr(4);
    std::int64_t secs = 0;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), secs);
    if (ec == std::errc() && end == num.data() + num.size() && secs >= 1 &&
        secs <= 30 * 24 * 3600) {
      return Lease{Kind::kTtl, std::chrono::seconds(secs)};
    }
    return InvalidArgumentError("lease '" + std::string(s) +
                                "': ttl must be whole seconds in 1..2592000");
  }
  return InvalidArgumentError("unknown lease '" + std::string(s) +
                              "' (expected delete_on_consume, ttl:SECONDS, cache, pinned)");
}

std::string Lease::ToString() const {
  switch (kind) {
    case Kind::kDeleteOnConsume:
      return "delete_on_consume";
    case Kind::kTtl:
      return "ttl:" + std::to_string(ttl.count());
    case Kind::kCache:
      return "cache";
    case Kind::kPinned:
      return "pinned";
  }
  return "delete_on_consume";
}

std::uint64_t PayloadDescriptor::nbytes() const {
  return TensorView{nullptr, dtype, shape, {}}.nbytes();
}

namespace {

// A payload no descriptor may describe: far past any tensor, and small
// enough that byte counts never overflow.
constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{1} << 48;

// Drops the other mode's fields, which a sender may include but the
// payload never uses: a descriptor then encodes the same in both forms.
// "" (versions 1 and 2) and "host", or "device".
Result<MemoryKind> ParseMemory(std::string_view s) {
  if (s.empty() || s == "host") {
    return MemoryKind::kHost;
  }
  if (s == "device") {
    return MemoryKind::kDevice;
  }
  return InvalidArgumentError("descriptor: memory must be host or device, got '" +
                              std::string(s.substr(0, 32)) + "'");
}

void KeepOwnModeFields(PayloadDescriptor& d) {
  if (d.mode == TransferMode::kStore) {
    d.producer_endpoint.clear();
    d.region_key = 0;
    d.region_offset = 0;
    d.payload_id = 0;
  } else {
    d.key_prefix.clear();
  }
}

}  // namespace

Status PayloadDescriptor::Validate() const {
  auto bad = [](const std::string& m) { return InvalidArgumentError("descriptor: " + m); };
  if (request_id.empty() || request_id.size() > 256) {
    return bad("request_id must be 1..256 bytes");
  }
  if (shape.empty() || shape.size() > 8) {
    return bad("shape must have rank 1..8");
  }
  for (std::int64_t dim : shape) {
    if (dim < 0) {
      return bad("shape has a negative dimension");
    }
  }
  if (NumElements(shape) > kMaxPayloadBytes / DTypeSize(dtype)) {
    return bad("shape describes more than 2^48 bytes");
  }
  if (!strides.empty() && strides != RowMajorStrides(shape)) {
    return bad("strides must be row-major (the wire layout is contiguous)");
  }
  if (chunk_dim < -1 || chunk_dim >= static_cast<int>(shape.size())) {
    return bad("chunk_dim " + std::to_string(chunk_dim) + " outside the tensor's rank " +
               std::to_string(shape.size()));
  }
  if (chunk_dim == -1 ? num_chunks != 1
                      : (num_chunks < 1 || num_chunks > kMaxChunks ||
                         num_chunks > shape[static_cast<std::size_t>(chunk_dim)])) {
    return bad("num_chunks " + std::to_string(num_chunks) +
               " must be 1 without chunk_dim, else 1..min(4096, shape[chunk_dim])");
  }
  if (mode == TransferMode::kP2p) {
    if (producer_endpoint.empty() || region_key == 0 || payload_id == 0) {
      return bad("p2p needs producer_endpoint, region_key and payload_id");
    }
  } else if (mode == TransferMode::kStore) {
    if (key_prefix.empty() || key_prefix.size() > 900) {
      return bad("store mode needs a key_prefix of 1..900 bytes");
    }
  } else {
    return bad("mode must be p2p or store");
  }
  if (one_object && (mode != TransferMode::kStore || !complete)) {
    return bad("one_object needs store mode and a complete payload");
  }
  if (memory == MemoryKind::kHost ? device != -1 : (device < -1 || device > 1023)) {
    return bad("device " + std::to_string(device) +
               (memory == MemoryKind::kHost ? " with host memory" : " outside -1..1023"));
  }
  return Status::Ok();
}

std::uint16_t PayloadDescriptor::version() const {
  return memory == MemoryKind::kDevice ? 3 : 2;
}

std::string PayloadDescriptor::StoreKey(int i) const {
  return one_object ? key_prefix + "/all" : key_prefix + "/" + std::to_string(i);
}

std::vector<std::string> PayloadDescriptor::StoreKeys() const {
  std::vector<std::string> keys;
  if (mode != TransferMode::kStore) {
    return keys;
  }
  for (int i = 0; i < (one_object ? 1 : num_chunks); ++i) {
    keys.push_back(StoreKey(i));
  }
  return keys;
}

std::string PayloadDescriptor::Encode() const {
  connector::v1::Descriptor p;
  p.set_request_id(request_id);
  p.set_kind(std::string(PayloadKindName(kind)));
  p.set_dtype(std::string(DTypeName(dtype)));
  p.mutable_shape()->Assign(shape.begin(), shape.end());
  const std::vector<std::int64_t> s = RowMajorStrides(shape);
  p.mutable_strides()->Assign(s.begin(), s.end());
  p.set_chunk_dim(chunk_dim);
  p.set_num_chunks(static_cast<std::uint32_t>(num_chunks));
  p.set_mode(std::string(TransferModeName(mode)));
  p.set_lease(lease.ToString());
  p.set_producer_endpoint(producer_endpoint);
  p.set_region_key(region_key);
  p.set_region_offset(region_offset);
  p.set_payload_id(payload_id);
  p.set_key_prefix(key_prefix);
  p.set_complete(complete);
  p.set_one_object(one_object);
  if (memory == MemoryKind::kDevice) {
    p.set_memory("device");
    p.set_device(device);
  }
  const std::string body = p.SerializeAsString();
  std::string out;
  out.reserve(kHeader + body.size());
  Put(out, kMagic, 4);
  Put(out, version(), 2);
  Put(out, 0, 2);
  Put(out, body.size(), 4);
  Put(out, XXH3_64bits(body.data(), body.size()), 8);
  return out + body;
}

Result<PayloadDescriptor> PayloadDescriptor::Decode(std::string_view in) {
  if (in.size() < kHeader) {
    return InvalidArgumentError("descriptor truncated: " + std::to_string(in.size()) +
                                " bytes, the header alone is " + std::to_string(kHeader));
  }
  if (Get(in, 0, 4) != kMagic) {
    return InvalidArgumentError("not a sluice payload descriptor (bad magic)");
  }
  const auto version = static_cast<std::uint16_t>(Get(in, 4, 2));
  if (version > kVersion) {
    return FailedPreconditionError("descriptor version " + std::to_string(version) +
                                   " is newer than this sluice reads (" + std::to_string(kVersion) +
                                   "): upgrade the consumer");
  }
  const std::uint64_t len = Get(in, 8, 4);
  if (len > kMaxBody || in.size() < kHeader + len) {
    return InvalidArgumentError("descriptor truncated: body of " + std::to_string(len) +
                                " bytes, " + std::to_string(in.size() - kHeader) + " present");
  }
  std::string_view body = in.substr(kHeader, len);
  if (XXH3_64bits(body.data(), body.size()) != Get(in, 12, 8)) {
    return InvalidArgumentError("descriptor corrupted: checksum mismatch");
  }
  connector::v1::Descriptor p;
  if (!p.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return InvalidArgumentError("descriptor corrupted: body does not parse");
  }
  PayloadDescriptor d;
  d.request_id = p.request_id();
  SLUICE_ASSIGN_OR_RETURN(d.kind, ParsePayloadKind(p.kind()));
  SLUICE_ASSIGN_OR_RETURN(d.dtype, ParseDType(p.dtype()));
  d.shape.assign(p.shape().begin(), p.shape().end());
  d.strides.assign(p.strides().begin(), p.strides().end());
  d.chunk_dim = p.chunk_dim();
  d.num_chunks = static_cast<int>(std::min<std::uint32_t>(p.num_chunks(), 1u << 30));
  SLUICE_ASSIGN_OR_RETURN(d.mode, ParseTransferMode(p.mode()));
  SLUICE_ASSIGN_OR_RETURN(d.lease, Lease::Parse(p.lease()));
  d.producer_endpoint = p.producer_endpoint();
  d.region_key = p.region_key();
  d.region_offset = p.region_offset();
  d.payload_id = p.payload_id();
  d.key_prefix = p.key_prefix();
  d.complete = p.complete();
  d.one_object = p.one_object();
  SLUICE_ASSIGN_OR_RETURN(d.memory, ParseMemory(p.memory()));
  d.device = p.has_device() ? p.device() : -1;
  KeepOwnModeFields(d);
  SLUICE_RETURN_IF_ERROR(d.Validate());
  return d;
}

std::string PayloadDescriptor::ToJson() const {
  nlohmann::json j;
  j["version"] = version();
  j["request_id"] = request_id;
  j["kind"] = PayloadKindName(kind);
  j["dtype"] = DTypeName(dtype);
  j["shape"] = shape;
  j["strides"] = RowMajorStrides(shape);
  j["chunk_dim"] = chunk_dim;
  j["num_chunks"] = num_chunks;
  j["mode"] = TransferModeName(mode);
  j["lease"] = lease.ToString();
  j["complete"] = complete;
  j["one_object"] = one_object;
  if (memory == MemoryKind::kDevice) {
    j["memory"] = "device";
    j["device"] = device;
  }
  if (mode == TransferMode::kP2p) {
    j["producer_endpoint"] = producer_endpoint;
    j["region_key"] = region_key;
    j["region_offset"] = region_offset;
    j["payload_id"] = payload_id;
  } else {
    j["key_prefix"] = key_prefix;
  }
  return j.dump();
}

Result<PayloadDescriptor> PayloadDescriptor::FromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("descriptor JSON does not parse as an object");
  }
  PayloadDescriptor d;
  // Each field: present and of the right type, else an error naming it.
  auto field = [&](const char* name, auto* out, bool required) -> Status {
    auto it = j.find(name);
    if (it == j.end()) {
      return required ? InvalidArgumentError(std::string("descriptor JSON: missing '") + name + "'")
                      : Status::Ok();
    }
    using T = std::remove_pointer_t<decltype(out)>;
    bool ok = false;
    if constexpr (std::is_same_v<T, std::string>) {
      ok = it->is_string();
    } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
      ok = it->is_array();
      for (const auto& e : *it) {
        ok = ok && e.is_number_integer();
      }
    } else {
      ok = it->is_number_integer();
    }
    if (!ok) {
      return InvalidArgumentError(std::string("descriptor JSON: '") + name +
                                  "' has the wrong type");
    }
    *out = it->template get<T>();
    return Status::Ok();
  };
  std::int64_t version = 0;
  std::string kind, dtype, mode, lease;
  SLUICE_RETURN_IF_ERROR(field("version", &version, true));
  if (version > kVersion || version < 1) {
    return FailedPreconditionError("descriptor version " + std::to_string(version) +
                                   " is not one this sluice reads (1.." + std::to_string(kVersion) +
                                   ")");
  }
  SLUICE_RETURN_IF_ERROR(field("request_id", &d.request_id, true));
  SLUICE_RETURN_IF_ERROR(field("kind", &kind, true));
  SLUICE_RETURN_IF_ERROR(field("dtype", &dtype, true));
  SLUICE_RETURN_IF_ERROR(field("shape", &d.shape, true));
  SLUICE_RETURN_IF_ERROR(field("strides", &d.strides, false));
  std::int64_t chunk_dim = -1, num_chunks = 1;
  SLUICE_RETURN_IF_ERROR(field("chunk_dim", &chunk_dim, false));
  SLUICE_RETURN_IF_ERROR(field("num_chunks", &num_chunks, false));
  if (chunk_dim < -1 || chunk_dim > 64 || num_chunks < 0 || num_chunks > (1 << 30)) {
    return InvalidArgumentError("descriptor JSON: chunk_dim or num_chunks out of range");
  }
  d.chunk_dim = static_cast<int>(chunk_dim);
  d.num_chunks = static_cast<int>(num_chunks);
  SLUICE_RETURN_IF_ERROR(field("mode", &mode, true));
  SLUICE_RETURN_IF_ERROR(field("lease", &lease, true));
  SLUICE_RETURN_IF_ERROR(field("producer_endpoint", &d.producer_endpoint, false));
  std::int64_t key = 0, off = 0, pid = 0;
  SLUICE_RETURN_IF_ERROR(field("region_key", &key, false));
  SLUICE_RETURN_IF_ERROR(field("region_offset", &off, false));
  SLUICE_RETURN_IF_ERROR(field("payload_id", &pid, false));
  // 64-bit ids round-trip through JSON's unsigned integers.
  for (auto [name, out] : {std::pair<const char*, std::uint64_t*>{"region_key", &d.region_key},
                           {"region_offset", &d.region_offset},
                           {"payload_id", &d.payload_id}}) {
    auto it = j.find(name);
    if (it != j.end() && it->is_number_unsigned()) {
      *out = it->get<std::uint64_t>();
    }
  }
  SLUICE_RETURN_IF_ERROR(field("key_prefix", &d.key_prefix, false));
  std::string memory;
  std::int64_t device = -1;
  SLUICE_RETURN_IF_ERROR(field("memory", &memory, false));
  SLUICE_RETURN_IF_ERROR(field("device", &device, false));
  SLUICE_ASSIGN_OR_RETURN(d.memory, ParseMemory(memory));
  if (device < -1 || device > 1023) {
    return InvalidArgumentError("descriptor JSON: device " + std::to_string(device) +
                                " outside -1..1023");
  }
  d.device = static_cast<int>(device);
  // Optional booleans: absent means false.
  for (auto [name, out] : {std::pair{"complete", &d.complete}, {"one_object", &d.one_object}}) {
    if (auto it = j.find(name); it != j.end()) {
      if (!it->is_boolean()) {
        return InvalidArgumentError(std::string("descriptor JSON: '") + name +
                                    "' has the wrong type");
      }
      *out = it->get<bool>();
    }
  }
  SLUICE_ASSIGN_OR_RETURN(d.kind, ParsePayloadKind(kind));
  SLUICE_ASSIGN_OR_RETURN(d.dtype, ParseDType(dtype));
  SLUICE_ASSIGN_OR_RETURN(d.mode, ParseTransferMode(mode));
  SLUICE_ASSIGN_OR_RETURN(d.lease, Lease::Parse(lease));
  KeepOwnModeFields(d);
  SLUICE_RETURN_IF_ERROR(d.Validate());
  return d;
}

}  // namespace sluice
