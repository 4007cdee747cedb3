// Cryptographically random bytes (OpenSSL's generator, falling back to the
// kernel's), for keys and nonces that must not be guessable.
#ifndef SLUICE_COMMON_RANDOM_H_
#define SLUICE_COMMON_RANDOM_H_

#include <cstddef>
#include <string>

namespace sluice::internal {

void RandomBytes(void* out, std::size_t len);
// 32 lowercase hex characters.
std::string RandomId();

}  // namespace sluice::internal

#endif  // SLUICE_COMMON_RANDOM_H_
