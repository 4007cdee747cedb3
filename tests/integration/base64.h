// Base64 decoding for tests that read OpenAI-style `b64_json` answers.
#ifndef SLUICE_TESTS_INTEGRATION_BASE64_H_
#define SLUICE_TESTS_INTEGRATION_BASE64_H_

#include <string>

namespace sluice::testing {

inline std::string Unbase64(const std::string& s) {
  static const std::string kChars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : s) {
    const auto p = kChars.find(c);
    if (p == std::string::npos) {
      break;
    }
    val = (val << 6) + static_cast<int>(p);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_BASE64_H_
