// The canonical key encoding of docs/design/cache-keys.md.
#include "sluice/cache/keys.h"

#include <openssl/sha.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace sluice::cache {
namespace {

constexpr std::string_view kMagic{"sluice-cache-key-v1\0", 20};

enum FieldType : std::uint8_t { kText = 1, kInt = 2, kFloat = 3, kIntList = 4, kTextList = 5 };

bool IsNameChar(char c, bool dot) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || (dot && c == '.');
}

Status CheckName(std::string_view what, std::string_view name, std::size_t max, bool dot) {
  const bool ok = !name.empty() && name.size() <= max &&
                  std::all_of(name.begin(), name.end(), [&](char c) { return IsNameChar(c, dot); });
  if (!ok) {
    return InvalidArgumentError(std::string(what) + " '" + std::string(name.substr(0, 160)) +
                                "': want 1.." + std::to_string(max) + " bytes of [a-z0-9_" +
                                (dot ? "." : "") + "]");
  }
  return Status::Ok();
}

class Encoder {
 public:
  void U8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(std::uint32_t v) { Le(v); }
  void U64(std::uint64_t v) { Le(v); }
  void Bytes(std::string_view s) { out_.append(s); }
  void Text(std::string_view s) {
    U64(s.size());
    Bytes(s);
  }
  const std::string& out() const { return out_; }

 private:
  template <typename T>
  void Le(T v) {
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
  }
  std::string out_;
};

Status EncodeValue(const Field& f, Encoder& e) {
  struct Visitor {
    const Field& f;
    Encoder& e;
    Status operator()(const std::string& s) {
      e.U8(kText);
      e.Text(s);
      return Status::Ok();
    }
    Status operator()(std::int64_t v) {
      e.U8(kInt);
      e.U64(static_cast<std::uint64_t>(v));
      return Status::Ok();
    }
    Status operator()(double v) {
      if (!std::isfinite(v)) {
        return InvalidArgumentError("cache key field '" + f.name + "': floats must be finite");
      }
      e.U8(kFloat);
      e.U64(std::bit_cast<std::uint64_t>(v == 0.0 ? 0.0 : v));
      return Status::Ok();
    }
    Status operator()(const std::vector<std::int64_t>& v) {
      e.U8(kIntList);
      e.U64(v.size());
      for (std::int64_t x : v) {
        e.U64(static_cast<std::uint64_t>(x));
      }
      return Status::Ok();
    }
    Status operator()(const std::vector<std::string>& v) {
      e.U8(kTextList);
      e.U64(v.size());
      for (const std::string& s : v) {
        e.Text(s);
      }
      return Status::Ok();
    }
  };
  return std::visit(Visitor{f, e}, f.value);
}

std::string Hex(const unsigned char* d, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[d[i] >> 4];
    out[2 * i + 1] = kDigits[d[i] & 0xf];
  }
  return out;
}

Status RefuseReserved(std::span<const Field> fields, std::initializer_list<std::string_view> names,
                      std::string_view what) {
  for (const Field& f : fields) {
    if (std::find(names.begin(), names.end(), f.name) != names.end()) {
      return InvalidArgumentError(std::string(what) + ": '" + f.name +
                                  "' is a reserved field name");
    }
  }
  return Status::Ok();
}

std::vector<Field> With(std::vector<Field> head, std::span<const Field> rest) {
  head.insert(head.end(), rest.begin(), rest.end());
  return head;
}

}  // namespace

Result<std::string> MakeKey(std::string_view kind, std::span<const Field> fields) {
  SLUICE_RETURN_IF_ERROR(CheckName("cache key kind", kind, 32, false));
  std::vector<const Field*> sorted;
  sorted.reserve(fields.size());
  for (const Field& f : fields) {
    SLUICE_RETURN_IF_ERROR(CheckName("cache key field", f.name, 128, true));
    sorted.push_back(&f);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Field* a, const Field* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->name == sorted[i - 1]->name) {
      return InvalidArgumentError("cache key field '" + sorted[i]->name + "' appears twice");
    }
  }
  Encoder e;
  e.Bytes(kMagic);
  e.U32(static_cast<std::uint32_t>(kind.size()));
  e.Bytes(kind);
  e.U32(static_cast<std::uint32_t>(sorted.size()));
  for (const Field* f : sorted) {
    e.U32(static_cast<std::uint32_t>(f->name.size()));
    e.Bytes(f->name);
    SLUICE_RETURN_IF_ERROR(EncodeValue(*f, e));
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(e.out().data()), e.out().size(), digest);
  return "cache/" + std::string(kind) + "/" + Hex(digest, sizeof(digest));
}

Result<std::string> ConditionKey(std::string_view encoder, std::string_view encoder_version,
                                 std::string_view text, std::span<const Field> params,
                                 std::string_view scope) {
  if (encoder.empty() || encoder_version.empty()) {
    return InvalidArgumentError("condition key: the encoder id and version must not be empty");
  }
  SLUICE_RETURN_IF_ERROR(
      RefuseReserved(params, {"encoder", "encoder_version", "text", "scope"}, "condition key"));
  std::vector<Field> head = {{"encoder", std::string(encoder)},
                             {"encoder_version", std::string(encoder_version)},
                             {"text", std::string(text)}};
  if (!scope.empty()) {
    head.push_back({"scope", std::string(scope)});
  }
  return MakeKey("cond", With(std::move(head), params));
}

Result<std::string> CheckpointKey(const CheckpointKeyParts& p) {
  if (p.model.empty() || p.model_version.empty() || p.sampler.empty() || p.dtype.empty()) {
    return InvalidArgumentError(
        "checkpoint key: model, model_version, sampler and dtype must not be empty");
  }
  if (p.total_steps < 2 || p.step < 1 || p.step >= p.total_steps) {
    return InvalidArgumentError("checkpoint key: step " + std::to_string(p.step) +
                                " must be in 1.." + std::to_string(p.total_steps - 1));
  }
  const std::vector<Field> fields = {
      {"model", p.model},
      {"model_version", p.model_version},
      {"sampler", p.sampler},
      {"seed", p.seed},
      {"guidance", p.guidance},
      {"condition_keys", p.condition_keys},
      {"total_steps", p.total_steps},
      {"step", p.step},
      {"shape", p.shape},
      {"dtype", p.dtype},
  };
  return MakeKey("ckpt", fields);
}

Result<std::string> FeatureKey(std::string_view ns, std::span<const Field> parts) {
  SLUICE_RETURN_IF_ERROR(CheckName("feature namespace", ns, 64, true));
  SLUICE_RETURN_IF_ERROR(RefuseReserved(parts, {"namespace"}, "feature key"));
  return MakeKey("feat", With({{"namespace", std::string(ns)}}, parts));
}

}  // namespace sluice::cache
