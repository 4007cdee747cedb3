#include "common/base64.h"

#include <openssl/evp.h>

namespace sluice::internal {

std::string Base64Encode(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');  // EVP writes a NUL too.
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Result<std::string> Base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) {
    return InvalidArgumentError("base64: " + std::to_string(in.size()) +
                                " characters, not a multiple of 4");
  }
  std::string out(in.size() / 4 * 3 + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) {
    return InvalidArgumentError("base64: characters outside the alphabet");
  }
  std::size_t pad = 0;
  for (std::size_t i = in.size(); i > 0 && in[i - 1] == '=' && pad < 2; --i) {
    ++pad;
  }
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

}  // namespace sluice::internal
