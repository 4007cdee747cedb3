// The worker's adapter cache over a fake store: one load per adapter, the
// least recently used dropped past the byte budget (the newest kept even
// alone over it), a dropped one still valid for its holder, and what is
// refused by name.
#include "runtime/adapter_cache.h"

#include <fstream>
#include <iterator>
#include <map>

#include <gtest/gtest.h>

#include "sluice/adapters.h"

namespace sluice::internal {
namespace {

std::string Mirror() {
  std::ifstream f(std::string(SLUICE_SOURCE_DIR) + "/models/adapters/mirror.safetensors",
                  std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(AdapterCacheTest, LoadsOnceDropsTheLeastRecentlyUsedAndRefusesByName) {
  const std::string mirror = Mirror();
  ASSERT_FALSE(mirror.empty());
  auto parsed = reference::Adapter::Parse(mirror);
  ASSERT_TRUE(parsed.ok());
  const std::string digest = (*parsed)->digest();
  std::map<std::string, std::string> store = {{AdapterStoreKey(digest), mirror}};
  int reads = 0;
  auto load = [&](const std::string& key) -> Result<std::vector<std::byte>> {
    ++reads;
    auto it = store.find(key);
    if (it == store.end()) {
      return NotFoundError("no object " + key);
    }
    const auto* p = reinterpret_cast<const std::byte*>(it->second.data());
    return std::vector<std::byte>(p, p + it->second.size());
  };
  AdapterCache cache(load, 2 * mirror.size());
  bool loaded = false;
  auto a = cache.Get(digest, "mirror", &loaded);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(loaded);
  auto again = cache.Get(digest, "mirror", &loaded);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(loaded);
  EXPECT_EQ(a->get(), again->get());
  EXPECT_EQ(reads, 1);

  // Misses, by name: not in the store; stored bytes of another digest.
  const std::string other = "0123456789abcdef";
  auto missing = cache.Get(other, "ghost");
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition)
      << "not kNotFound: the orchestrator would re-run encode for it";
  EXPECT_NE(missing.status().message().find("adapter \"ghost\" (0123456789abcdef)"),
            std::string::npos)
      << missing.status().message();
  store[AdapterStoreKey(other)] = mirror;
  auto wrong = cache.Get(other, "liar");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("digest is " + digest), std::string::npos);
  store[AdapterStoreKey(other)] = "junk";
  EXPECT_EQ(cache.Get(other, "junk").status().code(), StatusCode::kInvalidArgument);

  // Another adapter: one value differs (the file's last byte, a float's
  // exponent, kept finite).
  std::string other_file = mirror;
  other_file.back() = static_cast<char>(other_file.back() == 0x3c ? 0x3d : 0x3c);
  auto other_parsed = reference::Adapter::Parse(other_file);
  ASSERT_TRUE(other_parsed.ok()) << other_parsed.status().ToString();
  const std::string second = (*other_parsed)->digest();
  ASSERT_NE(second, digest);
  store[AdapterStoreKey(second)] = other_file;

  // A budget of one file: the newest stays, the older is dropped (and read
  // again when asked), while its holder's pointer stays valid.
  AdapterCache small(load, mirror.size() + 1);
  auto first = small.Get(digest, "mirror", &loaded);
  ASSERT_TRUE(first.ok() && loaded);
  ASSERT_TRUE(small.Get(second, "other", &loaded).ok() && loaded);
  EXPECT_EQ(small.stats().resident, 1u);
  EXPECT_EQ(small.stats().evictions, 1u);
  EXPECT_EQ(small.stats().resident_bytes, other_file.size());
  EXPECT_EQ(small.Resident(), std::vector<std::string>{second}) << "what the worker holds now";
  EXPECT_EQ((*first)->rank(), 8) << "a dropped adapter stays valid for its holder";
  ASSERT_TRUE(small.Get(digest, "mirror", &loaded).ok());
  EXPECT_TRUE(loaded) << "dropped, so read again";
  EXPECT_EQ(small.Resident(), std::vector<std::string>{digest});
  AdapterCache both(load, 1 << 20);
  ASSERT_TRUE(both.Get(digest, "mirror").ok());
  ASSERT_TRUE(both.Get(second, "other").ok());
  EXPECT_EQ(both.Resident(), (std::vector<std::string>{second, digest})) << "newest first";
  ASSERT_TRUE(both.Get(digest, "mirror").ok());
  EXPECT_EQ(both.Resident(), (std::vector<std::string>{digest, second}));
  // A budget smaller than one file still keeps the one its job needs.
  AdapterCache tiny(load, 10);
  ASSERT_TRUE(tiny.Get(digest, "mirror").ok());
  EXPECT_EQ(tiny.stats().resident, 1u);
  AdapterCache none(AdapterCache::Loader(), 1 << 20);
  EXPECT_EQ(none.Get(digest, "mirror").status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sluice::internal
