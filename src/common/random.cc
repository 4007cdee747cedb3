#include "common/random.h"

#include <openssl/rand.h>

#include <fstream>

namespace sluice::internal {

void RandomBytes(void* out, std::size_t len) {
  if (RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(len)) != 1) {
    // RAND_bytes fails only when the OS entropy source is broken; read the
    // kernel directly rather than hand out predictable values.
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    urandom.read(static_cast<char*>(out), static_cast<std::streamsize>(len));
  }
}

std::string RandomId() {
  unsigned char b[16];
  RandomBytes(b, sizeof(b));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s.push_back(kHex[c >> 4]);
    s.push_back(kHex[c & 15]);
  }
  return s;
}

}  // namespace sluice::internal
