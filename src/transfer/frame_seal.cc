#include "transfer/frame_seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

namespace sluice::internal {
namespace {

using Key = std::array<std::uint8_t, 32>;

// HMAC-SHA256(secret, label): a key derived for one use.
Key Derive(std::string_view secret, std::string_view label) {
  return Hmac(secret, label);
}

Status OpenSslError(std::string_view what) {
  return InternalError("frame seal: " + std::string(what) + " failed (OpenSSL)");
}

std::string_view View(const Key& k) {
  return {reinterpret_cast<const char*>(k.data()), k.size()};
}

evp_cipher_ctx_st* NewAead(const Key& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) {
    return nullptr;
  }
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    return nullptr;
  }
  return ctx;
}

// The 12-byte IV of frame `number`: 4 zero bytes, the number little-endian.
std::array<std::uint8_t, 12> Iv(std::uint64_t number) {
  std::array<std::uint8_t, 12> iv{};
  std::memcpy(iv.data() + 4, &number, sizeof(number));
  return iv;
}

// Runs `update` over `len` bytes in pieces an int can count.
template <typename F>
bool InPieces(std::uint64_t len, F update) {
  constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
  for (std::uint64_t off = 0; off < len; off += kPiece) {
    if (!update(off, static_cast<int>(std::min(kPiece, len - off)))) {
      return false;
    }
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<FrameSeal>> FrameSeal::Create(
    std::string_view secret, const std::array<std::uint8_t, kNonceBytes>& server_nonce,
    const std::array<std::uint8_t, kNonceBytes>& client_nonce, bool encrypt, bool initiator) {
  if (secret.empty()) {
    return InternalError("frame seal without a secret");
  }
  std::string label = "sluice-frame-seal/v1";
  label.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  label.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  label.push_back(encrypt ? 'E' : 'M');
  const Key master = Derive(secret, label);
  const std::string_view m(reinterpret_cast<const char*>(master.data()), master.size());
  const std::string_view out_dir = initiator ? "c2s" : "s2c";
  const std::string_view in_dir = initiator ? "s2c" : "c2s";
  std::unique_ptr<FrameSeal> s(new FrameSeal(encrypt));
  s->out_.mac = KeyedHmac(View(Derive(m, std::string("mac ") + std::string(out_dir))));
  s->in_.mac = KeyedHmac(View(Derive(m, std::string("mac ") + std::string(in_dir))));
  if (!s->out_.mac.valid() || !s->in_.mac.valid()) {
    return OpenSslError("HMAC-SHA256 set-up");
  }
  if (encrypt) {
    s->out_.aead = NewAead(Derive(m, std::string("aead ") + std::string(out_dir)), true);
    s->in_.aead = NewAead(Derive(m, std::string("aead ") + std::string(in_dir)), false);
    if (s->out_.aead == nullptr || s->in_.aead == nullptr) {
      return OpenSslError("AES-256-GCM set-up");
    }
  }
  return s;
}

FrameSeal::~FrameSeal() {
  for (Direction* d : {&out_, &in_}) {
    EVP_CIPHER_CTX_free(d->aead);
  }
}

Status FrameSeal::Mac(Direction& d, std::uint64_t number, const WireHeader& h,
                      const std::uint8_t* tag, std::string_view body, std::uint8_t* out) {
  std::array<std::uint8_t, 32> full;
  const std::string_view t = tag != nullptr
                                 ? std::string_view(reinterpret_cast<const char*>(tag), kTagBytes)
                                 : std::string_view();
  if (!d.mac.Compute({std::string_view(reinterpret_cast<const char*>(&number), sizeof(number)),
                      std::string_view(reinterpret_cast<const char*>(&h), sizeof(h)), t, body},
                     &full)) {
    return OpenSslError("HMAC-SHA256");
  }
  std::memcpy(out, full.data(), kMacBytes);
  return Status::Ok();
}

Status FrameSeal::Seal(const WireHeader& h, std::string_view body, const char* payload,
                       char* cipher, std::uint64_t payload_len, std::uint8_t* seal) {
  const std::uint64_t number = out_.next++;
  std::uint8_t* tag = nullptr;
  if (encrypt_) {
    tag = seal + kMacBytes;
    std::memset(tag, 0, kTagBytes);
    if (CarriesPayload(h) && payload_len > 0) {
      const auto iv = Iv(number);
      int n = 0;
      const auto* p = reinterpret_cast<const unsigned char*>(payload);
      auto* c = reinterpret_cast<unsigned char*>(cipher);
      const bool ok =
          EVP_EncryptInit_ex(out_.aead, nullptr, nullptr, nullptr, iv.data()) == 1 &&
          EVP_EncryptUpdate(out_.aead, nullptr, &n, reinterpret_cast<const unsigned char*>(&h),
                            sizeof(h)) == 1 &&
          InPieces(payload_len,
                   [&](std::uint64_t off, int len) {
                     return EVP_EncryptUpdate(out_.aead, c + off, &n, p + off, len) == 1;
                   }) &&
          EVP_EncryptFinal_ex(out_.aead, c + payload_len, &n) == 1 &&
          EVP_CIPHER_CTX_ctrl(out_.aead, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag) ==
              1;
      if (!ok) {
        return OpenSslError("AES-256-GCM encryption");
      }
    }
  }
  return Mac(out_, number, h, tag, body, seal);
}

Result<std::uint64_t> FrameSeal::Check(const WireHeader& h, const std::uint8_t* seal,
                                       std::string_view body) {
  const std::uint64_t number = in_.next++;
  std::uint8_t want[kMacBytes];
  SLUICE_RETURN_IF_ERROR(Mac(in_, number, h, encrypt_ ? seal + kMacBytes : nullptr, body, want));
  if (CRYPTO_memcmp(want, seal, kMacBytes) != 0) {
    return PermissionDeniedError("frame " + std::to_string(number) +
                                 " failed its integrity check (altered, replayed or injected)");
  }
  return number;
}

Status FrameSeal::OpenPayload(std::uint64_t number, const WireHeader& h, const std::uint8_t* seal,
                              char* payload, std::uint64_t len) {
  if (!encrypt_ || len == 0) {
    return Status::Ok();
  }
  const auto iv = Iv(number);
  std::uint8_t tag[kTagBytes];
  std::memcpy(tag, seal + kMacBytes, kTagBytes);
  auto* p = reinterpret_cast<unsigned char*>(payload);
  int n = 0;
  const bool set =
      EVP_DecryptInit_ex(in_.aead, nullptr, nullptr, nullptr, iv.data()) == 1 &&
      EVP_DecryptUpdate(in_.aead, nullptr, &n, reinterpret_cast<const unsigned char*>(&h),
                        sizeof(h)) == 1 &&
      InPieces(len,
               [&](std::uint64_t off, int piece) {
                 return EVP_DecryptUpdate(in_.aead, p + off, &n, p + off, piece) == 1;
               }) &&
      EVP_CIPHER_CTX_ctrl(in_.aead, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), tag) == 1;
  if (!set) {
    return OpenSslError("AES-256-GCM decryption");
  }
  if (EVP_DecryptFinal_ex(in_.aead, p + len, &n) != 1) {
    return PermissionDeniedError("the payload of frame " + std::to_string(number) +
                                 " failed its authentication tag (altered in transit)");
  }
  return Status::Ok();
}

}  // namespace sluice::internal
