#include "sluice/adapters.h"

#include <algorithm>

namespace sluice {

bool ValidAdapterName(std::string_view name) {
  if (name.empty() || name.size() > kMaxAdapterNameBytes || name.front() == '.') {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

bool ValidAdapterDigest(std::string_view digest) {
  return digest.size() == 16 && std::all_of(digest.begin(), digest.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string AdapterStoreKey(std::string_view digest) {
  return "sluice/adapter/" + std::string(digest);
}

}  // namespace sluice
