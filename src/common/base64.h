// Base64 (RFC 4648, standard alphabet, padded) over OpenSSL's EVP blocks:
// JSON fields that carry bytes (etcd's API, pictures in requests, previews).
#ifndef SLUICE_COMMON_BASE64_H_
#define SLUICE_COMMON_BASE64_H_

#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::internal {

std::string Base64Encode(std::string_view in);
// Errors: kInvalidArgument (a length not a multiple of 4, or characters
// outside the alphabet).
Result<std::string> Base64Decode(std::string_view in);

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_BASE64_H_
