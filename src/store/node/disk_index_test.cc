#include "store/node/disk_index.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

namespace pb = ::sluice::store::v1;
constexpr std::uint64_t kTier = 64 << 20;

class DiskIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-index-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    path_ = dir_ + "/tier.index";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static pb::NodeDelta Added(const std::string& key, bool on_disk, std::uint64_t offset,
                             std::uint64_t ttl_ms = 0) {
    pb::NodeDelta d;
    d.set_added(true);
    d.mutable_record()->set_key(key);
    d.mutable_record()->set_size(1 << 20);
    d.mutable_record()->set_on_disk(on_disk);
    d.mutable_record()->set_disk_offset(offset);
    d.mutable_record()->set_ttl_left_ms(ttl_ms);
    return d;
  }

  std::string dir_, path_;
};

TEST_F(DiskIndexTest, ListsWhatIsOnDiskAcrossARestart) {
  DiskIndex index(path_, kTier, {});
  google::protobuf::RepeatedPtrField<pb::NodeDelta> deltas;
  *deltas.Add() = Added("spilled", true, 0);
  *deltas.Add() = Added("in-memory", false, 0);
  *deltas.Add() = Added("with-ttl", true, 2 << 20, 60000);
  *deltas.Add() = Added("loaded-back", true, 4 << 20);
  *deltas.Add() = Added("loaded-back", false, 0);  // A later change to the key.
  ASSERT_TRUE(index.Apply(deltas).ok());
  EXPECT_EQ(index.size(), 2u);
  auto listed = DiskIndex::Load(path_, kTier);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key(), "spilled");
  EXPECT_EQ((*listed)[1].key(), "with-ttl");
  EXPECT_GT((*listed)[1].ttl_left_ms(), 0u);
  EXPECT_LE((*listed)[1].ttl_left_ms(), 60000u);
}

TEST_F(DiskIndexTest, ASpillForgetsWhatItOverwritesFirst) {
  DiskIndex index(path_, kTier, {});
  google::protobuf::RepeatedPtrField<pb::NodeDelta> deltas;
  *deltas.Add() = Added("low", true, 0);
  *deltas.Add() = Added("high", true, 8 << 20);
  ASSERT_TRUE(index.Apply(deltas).ok());
  ASSERT_TRUE(index.Forget((1 << 20) - 1, 2).ok());  // Overlaps the last byte of "low".
  auto listed = DiskIndex::Load(path_, kTier);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key(), "high");
}

TEST_F(DiskIndexTest, AnotherTierSizeOrGarbageStartsEmpty) {
  EXPECT_EQ(DiskIndex::Load(path_, kTier).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(DiskIndex(path_, kTier, {}).Save().ok());
  EXPECT_EQ(DiskIndex::Load(path_, 2 * kTier).status().code(), StatusCode::kDataLoss);
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << "\xff\xff\xff not an index";
  EXPECT_EQ(DiskIndex::Load(path_, kTier).status().code(), StatusCode::kDataLoss);
}

TEST_F(DiskIndexTest, RecordsOutsideTheTierAreNotTakenBack) {
  DiskIndex index(path_, kTier, {});
  google::protobuf::RepeatedPtrField<pb::NodeDelta> deltas;
  *deltas.Add() = Added("past-the-end", true, kTier - 1);
  ASSERT_TRUE(index.Apply(deltas).ok());
  auto listed = DiskIndex::Load(path_, kTier);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

}  // namespace
}  // namespace sluice::internal
