#include "store/master/master_state.h"

#include <map>
#include <set>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kMiB = 1 << 20;

class MasterStateTest : public ::testing::Test {
 protected:
  MasterStateTest() : state_(Options()) {}
  static MasterOptions Options() {
    MasterOptions o;
    o.high_watermark = 1.0;  // Eviction only on demand unless a test asks.
    o.low_watermark = 1.0;
    return o;
  }
  void AddNode(const std::string& id, std::uint64_t bytes, std::uint64_t key) {
    ASSERT_TRUE(state_.RegisterNode(id, id + ":1", {{{key, bytes}}, disk_bytes_}, {}, now_).ok());
  }
  // PutStart + PutEnd of `r` on `s` (a state with its own options).
  static Status Commit(MasterState& s, const PutRequest& r, TimePoint now) {
    Result<PutGrant> put = s.PutStart(r, now);
    return put.ok() ? s.PutEnd(r.key, put->put_id, now) : put.status();
  }
  Result<PutGrant> Put(const std::string& key, std::uint64_t size,
                       LeasePolicy policy = LeasePolicy::Cache()) {
    PutRequest r;
    r.key = key;
    r.size = size;
    r.policy = policy;
    auto g = state_.PutStart(r, now_);
    if (g.ok()) {
      EXPECT_TRUE(state_.PutEnd(key, g->put_id, now_).ok());
    }
    return g;
  }
  void Read(const std::string& key) {
    auto g = state_.GetStart(key, "client:1", now_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_TRUE(state_.GetEnd(key, g->lease_id, true).ok());
  }

  std::uint64_t disk_bytes_ = 0;
  TimePoint now_ = MasterClock::now();
  MasterState state_;
};

TEST_F(MasterStateTest, PutCommitsAndReadersSeeOnlyCompleteObjects) {
  AddNode("n1", 8 * kMiB, 11);
  PutRequest r;
  r.key = "latent/1";
  r.size = kMiB;
  r.tensor = TensorMeta{"bf16", {16, 21, 60, 104}, {}, "CTHW"};
  auto g = state_.PutStart(r, now_);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->replicas.size(), 1u);
  EXPECT_EQ(g->replicas[0].region_key, 11u);
  EXPECT_FALSE(state_.Exists("latent/1"));
  EXPECT_EQ(state_.GetStart("latent/1", "", now_).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(state_.PutEnd("latent/1", g->put_id, now_).ok());
  EXPECT_TRUE(state_.PutEnd("latent/1", g->put_id, now_).ok()) << "PutEnd retry is OK";
  auto read = state_.GetStart("latent/1", "", now_);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->meta.size, kMiB);
  EXPECT_EQ(read->meta.tensor, r.tensor);
}

// Without a preferred node the first copy goes to a node on the writer's
// host (by its transfer endpoint's address) when one has room, even one
// with less free space; a preferred node still comes first.
TEST_F(MasterStateTest, AWriteLandsOnANodeOfTheWritersHost) {
  AddNode("10.0.0.2", 64 * kMiB, 11);  // Endpoint 10.0.0.2:1, the most free space.
  AddNode("10.0.0.3", 8 * kMiB, 12);
  PutRequest r;
  r.size = kMiB;
  for (int i = 0; i < 4; ++i) {
    r.key = "near/" + std::to_string(i);
    r.client_endpoint = "10.0.0.3:40000";
    Result<PutGrant> g = state_.PutStart(r, now_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->replicas[0].region_key, 12u) << "the writer's host";
  }
  r.key = "elsewhere";
  r.client_endpoint = "10.0.0.9:40000";
  EXPECT_EQ(state_.PutStart(r, now_)->replicas[0].region_key, 11u) << "no local node: the freest";
  r.key = "preferred";
  r.client_endpoint = "10.0.0.3:40000";
  r.preferred_node = "10.0.0.2";
  EXPECT_EQ(state_.PutStart(r, now_)->replicas[0].region_key, 11u) << "the preferred node first";
}

TEST_F(MasterStateTest, ACommitIsAcknowledgedOnceItsNodeHeardOfIt) {
  AddNode("n1", 8 * kMiB, 11);
  ASSERT_TRUE(Put("a", 100).ok());
  ASSERT_TRUE(Put("b", 100).ok());
  const std::vector<MasterState::CommitMark> marks = state_.CommitMarks("b");
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(marks[0].node_id, "n1");
  EXPECT_FALSE(state_.Acknowledged(marks[0]));
  HeartbeatReply r = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_EQ(r.deltas.size(), 2u);
  EXPECT_FALSE(state_.Acknowledged(marks[0])) << "sent, not yet acknowledged";
  state_.Heartbeat("n1", r.deltas[0].seq, {}, now_);
  EXPECT_FALSE(state_.Acknowledged(marks[0])) << "only a's change acknowledged";
  state_.Heartbeat("n1", r.deltas[1].seq, {}, now_);
  EXPECT_TRUE(state_.Acknowledged(marks[0]));
  // The same registration again keeps the node (its change is still due);
  // a node restarted with new memory leaves nothing to wait for.
  ASSERT_TRUE(Put("c", 100).ok());
  const std::vector<MasterState::CommitMark> c = state_.CommitMarks("c");
  EXPECT_FALSE(state_.Acknowledged(c[0]));
  AddNode("n1", 8 * kMiB, 11);
  EXPECT_FALSE(state_.Acknowledged(c[0]));
  AddNode("n1", 16 * kMiB, 11);
  EXPECT_TRUE(state_.Acknowledged(c[0]));
  EXPECT_TRUE(state_.CommitMarks("missing").empty());
}

TEST_F(MasterStateTest, SecondPutOfAKeyFailsButARetryOfTheSameRequestIsGranted) {
  AddNode("n1", 8 * kMiB, 11);
  PutRequest r;
  r.key = "k";
  r.size = 100;
  r.request_id = "req-a";
  auto a = state_.PutStart(r, now_);
  auto again = state_.PutStart(r, now_);
  ASSERT_TRUE(a.ok() && again.ok());
  EXPECT_EQ(a->put_id, again->put_id);
  r.request_id = "req-b";
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(state_.PutEnd("k", a->put_id, now_).ok());
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kAlreadyExists);
}

TEST_F(MasterStateTest, BadInputGetsSpecificErrors) {
  EXPECT_EQ(state_.RegisterNode("n", "n:1", {{{1, 4096}}}, {}, now_).code(),
            StatusCode::kInvalidArgument)
      << "tiny segment";
  EXPECT_EQ(state_.RegisterNode("n", "n:1", {{{1, kMiB}, {1, kMiB}}}, {}, now_).code(),
            StatusCode::kInvalidArgument)
      << "overlapping segments";
  AddNode("n1", 4 * kMiB, 11);
  PutRequest r;
  r.size = 10;
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kInvalidArgument);
  r.key = std::string(1025, 'k');
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kInvalidArgument);
  r.key = "k";
  r.size = 0;
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kInvalidArgument);
  r.size = 5 * kMiB;
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kInvalidArgument);
  r.size = 10;
  r.replica_num = 2;
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kUnavailable)
      << "more replicas than nodes is transient (nodes re-register after a restart)";
  EXPECT_EQ(state_.GetStart("nope", "", now_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state_.Remove("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(state_.PutEnd("nope", 1, now_).code(), StatusCode::kNotFound);
}

// Right after a master restart no node has re-registered: a put is
// retryable (it used to be "larger than any segment", invalid-argument).
TEST_F(MasterStateTest, APutBeforeAnyNodeRegisteredIsRetryable) {
  PutRequest r;
  r.key = "early";
  r.size = 32 * 1024;
  Status s = state_.PutStart(r, now_).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("no store node is registered yet"), std::string_view::npos);
  AddNode("n1", 4 * kMiB, 11);
  EXPECT_TRUE(state_.PutStart(r, now_).ok());
}

TEST_F(MasterStateTest, DeleteOnConsumeAfterNReads) {
  AddNode("n1", 8 * kMiB, 11);
  ASSERT_TRUE(Put("cond", kMiB, LeasePolicy::DeleteOnConsume(2)).ok());
  Read("cond");
  EXPECT_TRUE(state_.Exists("cond"));
  auto g = state_.GetStart("cond", "", now_);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(state_.GetEnd("cond", g->lease_id, false).ok()) << "a failed read does not count";
  EXPECT_TRUE(state_.Exists("cond"));
  Read("cond");
  EXPECT_FALSE(state_.Exists("cond"));
  EXPECT_EQ(state_.Stats().used_bytes, 0u);
  auto ev = state_.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ObjectEventKind::kConsumed);
}

TEST_F(MasterStateTest, TtlExpiresAfterCommit) {
  AddNode("n1", 8 * kMiB, 11);
  ASSERT_TRUE(Put("t", 100, LeasePolicy::Ttl(500ms)).ok());
  state_.Heartbeat("n1", 0, {}, now_ + 400ms);
  state_.Tick(now_ + 400ms);
  EXPECT_TRUE(state_.Exists("t"));
  state_.Tick(now_ + 600ms);
  EXPECT_FALSE(state_.Exists("t"));
  auto ev = state_.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ObjectEventKind::kExpired);
}

TEST_F(MasterStateTest, EvictionIsLruOverCacheThenSoftPinAndNeverDeleteOnConsume) {
  AddNode("n1", 4 * kMiB, 11);
  ASSERT_TRUE(Put("pin", kMiB, LeasePolicy::SoftPin()).ok());
  ASSERT_TRUE(Put("doc", kMiB, LeasePolicy::DeleteOnConsume(1)).ok());
  ASSERT_TRUE(Put("a", kMiB).ok());
  ASSERT_TRUE(Put("b", kMiB).ok());
  Read("a");  // "b" is now least recently used.
  ASSERT_TRUE(Put("c", kMiB).ok());
  EXPECT_FALSE(state_.Exists("b"));
  EXPECT_TRUE(state_.Exists("a"));
  ASSERT_TRUE(Put("d", kMiB).ok());
  EXPECT_FALSE(state_.Exists("a"));
  // Unevictable payloads push out the remaining cache objects, then the pin.
  ASSERT_TRUE(Put("e", kMiB, LeasePolicy::DeleteOnConsume(1)).ok());
  EXPECT_FALSE(state_.Exists("c"));
  ASSERT_TRUE(Put("f", kMiB, LeasePolicy::DeleteOnConsume(1)).ok());
  EXPECT_FALSE(state_.Exists("d"));
  EXPECT_TRUE(state_.Exists("pin"));
  ASSERT_TRUE(Put("g", kMiB, LeasePolicy::DeleteOnConsume(1)).ok());
  EXPECT_FALSE(state_.Exists("pin")) << "soft pins go once no cache object is left";
  EXPECT_TRUE(state_.Exists("doc"));
  EXPECT_EQ(state_.Stats().evictions, 5u);
  EXPECT_EQ(Put("h", kMiB, LeasePolicy::DeleteOnConsume(1)).status().code(),
            StatusCode::kResourceExhausted);
}

LeasePolicy Classed(const std::string& c, LeasePolicy p = LeasePolicy::Cache()) {
  p.cache_class = c;
  return p;
}

TEST(MasterStateCacheTest, AClassPastItsBudgetEvictsItsOwnLruEntriesOnly) {
  MasterOptions o;
  o.high_watermark = 1.0;
  o.low_watermark = 1.0;
  o.cache_budgets = {{"cond", 0.25}};  // 2 MiB of 8.
  MasterState s(o);
  const TimePoint now = MasterClock::now();
  ASSERT_TRUE(s.RegisterNode("n1", "n1:1", {{{11, 8 * kMiB}}, 0}, {}, now).ok());
  auto put = [&](const std::string& key, LeasePolicy p) {
    PutRequest r;
    r.key = key;
    r.size = kMiB;
    r.policy = std::move(p);
    auto g = s.PutStart(r, now);
    return g.ok() ? s.PutEnd(key, g->put_id, now) : g.status();
  };
  ASSERT_TRUE(put("cond/a", Classed("cond")).ok());
  ASSERT_TRUE(put("cond/b", Classed("cond")).ok());
  ASSERT_TRUE(put("feat/x", Classed("feat")).ok());
  ASSERT_TRUE(put("plain", LeasePolicy::Cache()).ok());
  ASSERT_TRUE(put("payload", LeasePolicy::DeleteOnConsume(1)).ok());
  auto g = s.GetStart("cond/a", "client:1", now);  // "cond/b" is now the class's LRU.
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(s.GetEnd("cond/a", g->lease_id, true).ok());
  ASSERT_TRUE(put("cond/c", Classed("cond")).ok());
  EXPECT_FALSE(s.Exists("cond/b")) << "the class's LRU entry stays past its budget";
  for (const char* k : {"cond/a", "cond/c", "feat/x", "plain", "payload"}) {
    EXPECT_TRUE(s.Exists(k)) << k << " was evicted for another class's budget";
  }
  // An entry being read is never evicted; the next LRU one goes instead.
  auto held = s.GetStart("cond/a", "client:1", now);
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(put("cond/d", Classed("cond", LeasePolicy::SoftPin())).ok());
  EXPECT_TRUE(s.Exists("cond/a"));
  EXPECT_FALSE(s.Exists("cond/c"));
  const MasterStats st = s.Stats();
  ASSERT_EQ(st.cache_classes.count("cond"), 1u);
  EXPECT_EQ(st.cache_classes.at("cond").objects, 2u);
  EXPECT_EQ(st.cache_classes.at("cond").bytes, 2 * kMiB);
  EXPECT_EQ(st.cache_classes.at("cond").budget_bytes, 2 * kMiB);
  EXPECT_EQ(st.cache_classes.at("cond").evictions, 2u);
  EXPECT_EQ(st.cache_classes.at("feat").budget_bytes, 0u);
  EXPECT_EQ(st.evictions, 2u);
  // A class only on cache objects, and a well-formed name.
  EXPECT_EQ(put("bad1", Classed("cond", LeasePolicy::DeleteOnConsume(1))).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(put("bad2", Classed("Cond!")).code(), StatusCode::kInvalidArgument);
}

TEST(MasterStateCacheTest, AnEntryReadOftenIsSoftPinnedAndOutlivesColderOnes) {
  MasterOptions o;
  o.high_watermark = 1.0;
  o.low_watermark = 1.0;
  o.soft_pin_reads = 3;
  MasterState s(o);
  const TimePoint now = MasterClock::now();
  ASSERT_TRUE(s.RegisterNode("n1", "n1:1", {{{11, 3 * kMiB}}, 0}, {}, now).ok());
  auto put = [&](const std::string& key) {
    PutRequest r;
    r.key = key;
    r.size = kMiB;
    r.policy = Classed("cond");
    auto g = s.PutStart(r, now);
    return g.ok() ? s.PutEnd(key, g->put_id, now) : g.status();
  };
  auto read = [&](const std::string& key) {
    auto g = s.GetStart(key, "client:1", now);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(s.GetEnd(key, g->lease_id, true).ok());
  };
  ASSERT_TRUE(put("hot").ok());
  for (int i = 0; i < 3; ++i) {
    read("hot");
  }
  EXPECT_EQ(s.Stats().soft_pins, 1u);
  ASSERT_TRUE(put("cold1").ok());
  ASSERT_TRUE(put("cold2").ok());
  read("cold1");
  read("cold2");  // "hot" is now the least recently used of all.
  ASSERT_TRUE(put("cold3").ok());
  EXPECT_TRUE(s.Exists("hot")) << "a soft pin went before a cache object";
  EXPECT_FALSE(s.Exists("cold1"));
  EXPECT_EQ(s.Stats().soft_pins, 1u);
}

TEST_F(MasterStateTest, FullOfUnconsumedPayloadsIsResourceExhaustedUntilConsumed) {
  AddNode("n1", 2 * kMiB, 11);
  ASSERT_TRUE(Put("p1", kMiB, LeasePolicy::DeleteOnConsume(1)).ok());
  ASSERT_TRUE(Put("p2", kMiB, LeasePolicy::DeleteOnConsume(1)).ok());
  EXPECT_EQ(Put("p3", kMiB, LeasePolicy::DeleteOnConsume(1)).status().code(),
            StatusCode::kResourceExhausted);
  Read("p1");
  EXPECT_TRUE(Put("p3", kMiB, LeasePolicy::DeleteOnConsume(1)).ok());
}

TEST_F(MasterStateTest, ReadersInFlightKeepRemovedObjectsAlive) {
  AddNode("n1", 2 * kMiB, 11);
  ASSERT_TRUE(Put("x", kMiB).ok());
  auto g = state_.GetStart("x", "", now_);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(state_.Remove("x").ok());
  EXPECT_FALSE(state_.Exists("x"));
  EXPECT_EQ(state_.Stats().used_bytes, kMiB) << "bytes stay while a reader holds a lease";
  ASSERT_TRUE(state_.GetEnd("x", g->lease_id, true).ok());
  EXPECT_EQ(state_.Stats().used_bytes, 0u);
}

TEST_F(MasterStateTest, ARenewedReadLeaseOutlivesItsFirstTimeout) {
  AddNode("n1", 2 * kMiB, 11);
  ASSERT_TRUE(Put("x", kMiB).ok());
  auto g = state_.GetStart("x", "", now_);
  ASSERT_TRUE(g.ok());
  const auto timeout = Options().read_lease_timeout;
  const TimePoint renewed = now_ + timeout * 3 / 4;
  ASSERT_TRUE(state_.RenewRead("x", g->lease_id, renewed).ok());
  ASSERT_TRUE(state_.RenewRead("x", g->lease_id, renewed).ok()) << "idempotent";
  const TimePoint later = now_ + timeout * 3 / 2;  // Past the first deadline, not the renewed.
  state_.Heartbeat("n1", 0, {}, later);
  state_.Tick(later);
  EXPECT_TRUE(state_.GetEnd("x", g->lease_id, true).ok());
  EXPECT_EQ(state_.RenewRead("x", g->lease_id, later).code(), StatusCode::kNotFound)
      << "an ended lease cannot be renewed";
  EXPECT_EQ(state_.RenewRead("nope", 1, later).code(), StatusCode::kNotFound);

  auto h = state_.GetStart("x", "", later);
  ASSERT_TRUE(h.ok());
  const TimePoint expired = later + timeout * 2;
  state_.Heartbeat("n1", 0, {}, expired);
  state_.Tick(expired);
  EXPECT_EQ(state_.RenewRead("x", h->lease_id, expired).code(), StatusCode::kNotFound)
      << "an expired lease cannot be renewed";
}

TEST_F(MasterStateTest, SilentNodeIsDroppedAndItsLastReplicasReportedLost) {
  AddNode("n1", 4 * kMiB, 11);
  AddNode("n2", 4 * kMiB, 22);
  PutRequest r;
  r.size = 100;
  r.key = "both";
  r.replica_num = 2;
  auto g = state_.PutStart(r, now_);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(state_.PutEnd("both", g->put_id, now_).ok());
  r.key = "only-n1";
  r.replica_num = 1;
  r.preferred_node = "n1";
  g = state_.PutStart(r, now_);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->replicas[0].node_id, "n1") << "preferred node honoured";
  ASSERT_TRUE(state_.PutEnd("only-n1", g->put_id, now_).ok());
  const TimePoint later = now_ + 4s;
  EXPECT_FALSE(state_.Heartbeat("n2", 0, {}, later).reregister);
  state_.Tick(later);
  EXPECT_TRUE(state_.Heartbeat("n1", 0, {}, later).reregister)
      << "a dropped node is told to re-register";
  EXPECT_TRUE(state_.Exists("both"));
  EXPECT_FALSE(state_.Exists("only-n1"));
  auto ev = state_.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ObjectEventKind::kLost);
  EXPECT_EQ(ev[0].key, "only-n1");
  auto read = state_.GetStart("both", "", later);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->replicas.size(), 1u);
  EXPECT_EQ(read->replicas[0].node_id, "n2");
}

// A node that died before the master noticed: a caller that could not
// reach it is placed elsewhere while another node has room, and on it
// again (nothing evicted) when none has.
TEST_F(MasterStateTest, APutAvoidsTheNodesItsCallerCouldNotReachWhileOthersHaveRoom) {
  AddNode("n1", 4 * kMiB, 11);
  AddNode("n2", kMiB, 22);
  PutRequest r;
  r.key = "a";
  r.size = 100;
  auto g = state_.PutStart(r, now_);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->replicas[0].node_id, "n1") << "the emptier node, as usual";
  ASSERT_TRUE(state_.PutRevoke("a", g->put_id).ok());
  r.unreachable = {"n1:1"};
  g = state_.PutStart(r, now_);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->replicas[0].node_id, "n2");
  ASSERT_TRUE(state_.PutEnd("a", g->put_id, now_).ok());
  r.key = "big";
  r.size = 2 * kMiB;  // Only n1 holds it.
  g = state_.PutStart(r, now_);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->replicas[0].node_id, "n1");
  EXPECT_TRUE(state_.Exists("a")) << "nothing evicted to avoid a node";
}

TEST_F(MasterStateTest, DeadWriterPutIsRevokedAfterThePutTimeout) {
  AddNode("n1", kMiB, 11);
  PutRequest r;
  r.key = "w";
  r.size = kMiB;
  ASSERT_TRUE(state_.PutStart(r, now_).ok());
  r.key = "w2";
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kResourceExhausted);
  const TimePoint later = now_ + state_.options().put_timeout + 1s;
  state_.Heartbeat("n1", 0, {}, later);
  state_.Tick(later);
  EXPECT_TRUE(state_.PutStart(r, later).ok()) << "the dead writer's space was freed";
}

TEST_F(MasterStateTest, NodeDirectoryFollowsCommitsAndRebuildsARestartedMaster) {
  AddNode("n1", 8 * kMiB, 11);
  PutRequest r;
  r.key = "keep";
  r.size = kMiB;
  r.tensor = TensorMeta{"f32", {4}, {}, ""};
  auto g = state_.PutStart(r, now_);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(state_.Heartbeat("n1", 0, {}, now_).deltas.empty())
      << "uncommitted puts are not logged";
  ASSERT_TRUE(state_.PutEnd("keep", g->put_id, now_).ok());
  ASSERT_TRUE(Put("gone", 100).ok());
  ASSERT_TRUE(state_.Remove("gone").ok());
  HeartbeatReply hb = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_EQ(hb.deltas.size(), 3u);
  EXPECT_TRUE(hb.deltas[0].added);
  EXPECT_EQ(hb.deltas[0].record.offset, g->replicas[0].offset);
  EXPECT_FALSE(hb.deltas[2].added);
  EXPECT_EQ(hb.deltas[2].record.key, "gone");
  EXPECT_EQ(state_.Heartbeat("n1", hb.deltas[1].seq, {}, now_).deltas.size(), 1u)
      << "acknowledged changes are dropped";

  // A new master learns the object back from the node's directory.
  MasterState fresh(Options());
  EXPECT_TRUE(fresh.Heartbeat("n1", 0, {}, now_).reregister);
  std::size_t skipped = 0;
  ObjectRecord bad = hb.deltas[0].record;
  bad.key = "overlaps";
  ASSERT_TRUE(fresh
                  .RegisterNode("n1", "n1:1", {{{11, 8 * kMiB}}}, {hb.deltas[0].record, bad}, now_,
                                &skipped)
                  .ok());
  EXPECT_EQ(skipped, 1u);
  EXPECT_TRUE(fresh.Exists("keep"));
  EXPECT_FALSE(fresh.Exists("overlaps"));
  auto read = fresh.GetStart("keep", "", now_);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->meta.tensor, r.tensor);
  EXPECT_EQ(read->replicas[0].offset, g->replicas[0].offset);
  r.key = "new";
  auto g2 = fresh.PutStart(r, now_);
  ASSERT_TRUE(g2.ok());
  EXPECT_NE(g2->replicas[0].offset, g->replicas[0].offset) << "restored space is not reused";
}

class MasterTierTest : public MasterStateTest {
 protected:
  // Runs the node's side of every pending command and reports success.
  void NodeDoesItsWork(const std::string& node) {
    HeartbeatReply hb = state_.Heartbeat(node, 0, {}, now_);
    std::vector<CommandResult> done;
    for (const NodeCommand& c : hb.commands) {
      done.push_back({c.id, true, ""});
    }
    state_.Heartbeat(node, 0, done, now_);
  }
};

TEST_F(MasterTierTest, UnconsumedPayloadsSpillInsteadOfBeingRefusedAndReadBackTransparently) {
  disk_bytes_ = 16 * kMiB;
  AddNode("n1", 4 * kMiB, 11);
  const auto doc = LeasePolicy::DeleteOnConsume(1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Put("p" + std::to_string(i), kMiB, doc).ok());
  }
  // 75% used: below the 95% high watermark (set in this test's options?)
  // The fixture disables watermarks (1.0), so memory fills before spilling.
  ASSERT_TRUE(Put("p3", kMiB, doc).ok());
  Status full = Put("p4", kMiB, doc).status();
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("spilled"), std::string_view::npos) << full.ToString();
  HeartbeatReply hb = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_FALSE(hb.commands.empty());
  EXPECT_EQ(hb.commands[0].kind, NodeCommand::Kind::kSpill);
  EXPECT_EQ(hb.commands[0].key, "p0") << "the oldest payload spills first";
  NodeDoesItsWork("n1");
  EXPECT_EQ(state_.Stats().spills, hb.commands.size());
  EXPECT_GT(state_.Stats().disk_used_bytes, 0u);
  ASSERT_TRUE(Put("p4", kMiB, doc).ok()) << "the spill made room";
  EXPECT_TRUE(state_.Exists("p0")) << "spilled, not dropped";

  // Reading a spilled object parks the reader: memory is full, so another
  // payload spills first, then the node loads p0 back.
  auto parked = state_.GetStart("p0", "", now_);
  ASSERT_TRUE(parked.ok()) << parked.status().ToString();
  EXPECT_TRUE(parked->loading);
  NodeDoesItsWork("n1");  // The spill that makes room.
  parked = state_.GetStart("p0", "", now_);
  ASSERT_TRUE(parked.ok()) << parked.status().ToString();
  EXPECT_TRUE(parked->loading);
  NodeDoesItsWork("n1");  // The load.
  std::vector<std::string> loaded = state_.TakeLoaded();
  ASSERT_EQ(loaded, std::vector<std::string>{"p0"});
  auto g = state_.GetStart("p0", "", now_);
  ASSERT_TRUE(g.ok());
  ASSERT_FALSE(g->loading);
  ASSERT_TRUE(state_.GetEnd("p0", g->lease_id, true).ok());
  EXPECT_FALSE(state_.Exists("p0")) << "consumed after the read";
  EXPECT_EQ(state_.Stats().loads, 1u);
  for (const char* k : {"p1", "p2", "p3", "p4"}) {
    EXPECT_TRUE(state_.Exists(k)) << k << ": spilling never drops a payload";
  }
}

TEST_F(MasterTierTest, ALoadOnAFullNodeSpillsOnThatNodeWhateverTheOthersHold) {
  disk_bytes_ = 16 * kMiB;
  AddNode("n1", 2 * kMiB, 11);
  const auto doc = LeasePolicy::DeleteOnConsume(1);
  ASSERT_TRUE(Put("a", kMiB, doc).ok());
  ASSERT_TRUE(Put("b", kMiB, doc).ok());
  ASSERT_EQ(Put("c", kMiB, doc).status().code(), StatusCode::kResourceExhausted);
  NodeDoesItsWork("n1");  // Spills "a".
  ASSERT_TRUE(Put("c", kMiB, doc).ok());
  AddNode("n2", 64 * kMiB, 12);  // The store as a whole is nearly empty now.
  auto parked = state_.GetStart("a", "", now_);
  ASSERT_TRUE(parked.ok()) << parked.status().ToString();
  EXPECT_TRUE(parked->loading);
  HeartbeatReply hb = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_EQ(hb.commands.size(), 1u);
  EXPECT_EQ(hb.commands[0].kind, NodeCommand::Kind::kSpill) << "room is made on n1";
  NodeDoesItsWork("n1");  // The spill.
  parked = state_.GetStart("a", "", now_);
  ASSERT_TRUE(parked.ok());
  NodeDoesItsWork("n1");  // The load.
  auto read = state_.GetStart("a", "", now_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_FALSE(read->loading);
  EXPECT_EQ(read->replicas[0].node_id, "n1");
}

TEST_F(MasterTierTest, APutThatFitsNoNodeSpillsOnOneThoughTheStoreHasRoomOverall) {
  disk_bytes_ = 16 * kMiB;
  AddNode("n1", 4 * kMiB, 11);
  AddNode("n2", 4 * kMiB, 12);
  const auto doc = LeasePolicy::DeleteOnConsume(1);
  ASSERT_TRUE(Put("a", 3 * kMiB, doc).ok());
  ASSERT_TRUE(Put("b", 3 * kMiB, doc).ok());
  // 2 MiB free in all, 1 MiB on each node: "c" fits nowhere until a spill.
  Status wait = Put("c", 2 * kMiB, doc).status();
  EXPECT_EQ(wait.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(wait.message().find("spilled"), std::string_view::npos)
      << "a spill is under way, not a full store: " << wait.ToString();
  NodeDoesItsWork("n1");
  NodeDoesItsWork("n2");
  ASSERT_TRUE(Put("c", 2 * kMiB, doc).ok());
  EXPECT_EQ(state_.Stats().spills, 1u) << "one node's room was enough";
}

TEST_F(MasterTierTest, WithoutADiskTierAFullStoreRefusesPuts) {
  AddNode("n1", 2 * kMiB, 11);
  const auto doc = LeasePolicy::DeleteOnConsume(1);
  ASSERT_TRUE(Put("a", kMiB, doc).ok());
  ASSERT_TRUE(Put("b", kMiB, doc).ok());
  Status full = Put("c", kMiB, doc).status();
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message().find("spilled"), std::string_view::npos);
  EXPECT_TRUE(state_.Heartbeat("n1", 0, {}, now_).commands.empty());
}

TEST_F(MasterTierTest, RemovingAnObjectMidSpillWaitsForTheNode) {
  disk_bytes_ = 16 * kMiB;
  AddNode("n1", 2 * kMiB, 11);
  const auto doc = LeasePolicy::DeleteOnConsume(1);
  ASSERT_TRUE(Put("a", kMiB, doc).ok());
  ASSERT_TRUE(Put("b", kMiB, doc).ok());
  EXPECT_FALSE(Put("c", kMiB, doc).ok());  // Schedules a spill of "a".
  HeartbeatReply hb = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_EQ(hb.commands.size(), 1u);
  ASSERT_TRUE(state_.Remove("a").ok());
  EXPECT_FALSE(state_.Exists("a"));
  EXPECT_EQ(state_.Stats().used_bytes, 2 * kMiB) << "the node is still reading a's memory";
  state_.Heartbeat("n1", 0, {{hb.commands[0].id, true, ""}}, now_);
  EXPECT_EQ(state_.Stats().used_bytes, kMiB);
  EXPECT_EQ(state_.Stats().disk_used_bytes, 0u);
}

// A node restarted with new memory but its old disk tier: what it lists on
// disk where this master placed it stays (not reported lost); a record the
// master disagrees with (in memory here, or unknown) is skipped; once the
// master has dropped the node, nothing it lists comes back.
TEST_F(MasterTierTest, ARestartedNodeKeepsItsDiskObjectsWhereTheMasterAgrees) {
  disk_bytes_ = 16 * kMiB;
  AddNode("n1", 2 * kMiB, 11);
  const auto doc = LeasePolicy::DeleteOnConsume(1);
  ASSERT_TRUE(Put("a", kMiB, doc).ok());
  ASSERT_TRUE(Put("b", kMiB, doc).ok());
  EXPECT_FALSE(Put("c", kMiB, doc).ok());  // Schedules a spill of "a".
  NodeDoesItsWork("n1");
  ASSERT_TRUE(Put("c", kMiB, doc).ok());
  std::map<std::string, ObjectRecord> dir;  // The node's directory.
  for (const NodeDelta& d : state_.Heartbeat("n1", 0, {}, now_).deltas) {
    if (d.added) {
      dir[d.record.key] = d.record;
    }
  }
  ASSERT_TRUE(dir["a"].on_disk);
  ASSERT_FALSE(dir["b"].on_disk);
  ObjectRecord forged_b = dir["b"];  // In memory as the master sees it.
  forged_b.on_disk = true;
  forged_b.disk_offset = 8 * kMiB;
  ObjectRecord ghost = dir["a"];  // A key this master never had.
  ghost.key = "ghost";
  ghost.disk_offset = 4 * kMiB;
  (void)state_.TakeEvents();

  std::size_t skipped = 0;
  ASSERT_TRUE(state_
                  .RegisterNode("n1", "n1:1", {{{99, 2 * kMiB}}, disk_bytes_},
                                {dir["a"], forged_b, ghost}, now_, &skipped)
                  .ok());
  EXPECT_EQ(skipped, 2u);
  EXPECT_TRUE(state_.Exists("a")) << "on disk: survives the node's restart";
  EXPECT_FALSE(state_.Exists("b"));
  EXPECT_FALSE(state_.Exists("c"));
  EXPECT_FALSE(state_.Exists("ghost"));
  std::set<std::string> lost;
  for (const ObjectEvent& e : state_.TakeEvents()) {
    if (e.kind == ObjectEventKind::kLost) {
      lost.insert(e.key);
    }
  }
  EXPECT_EQ(lost, (std::set<std::string>{"b", "c"}));
  auto g = state_.GetStart("a", "", now_);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->loading) << "read back from disk into the new memory";
  HeartbeatReply hb = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_EQ(hb.commands.size(), 1u);
  EXPECT_EQ(hb.commands[0].kind, NodeCommand::Kind::kLoad);
  EXPECT_EQ(hb.commands[0].mem_region_key, 99u);
  EXPECT_EQ(hb.commands[0].disk_offset, dir["a"].disk_offset);

  // Restarted again before it ran that load: the disk copy is whole, so "a"
  // survives again (a read that had started the load used to make it
  // lost), and the next read loads it into the newest memory.
  ASSERT_TRUE(
      state_.RegisterNode("n1", "n1:1", {{{97, 2 * kMiB}}, disk_bytes_}, {dir["a"]}, now_, &skipped)
          .ok());
  EXPECT_EQ(skipped, 0u);
  EXPECT_TRUE(state_.Exists("a"));
  for (const ObjectEvent& e : state_.TakeEvents()) {
    EXPECT_NE(e.kind, ObjectEventKind::kLost) << e.key;
  }
  g = state_.GetStart("a", "", now_);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->loading);
  hb = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_EQ(hb.commands.size(), 1u);
  EXPECT_EQ(hb.commands[0].mem_region_key, 97u);

  // Silent past the node timeout: dropped, "a" reported lost. What the
  // node lists when it comes back is stale.
  const TimePoint later = now_ + 10s;
  state_.Tick(later);
  EXPECT_FALSE(state_.Exists("a"));
  ASSERT_TRUE(
      state_
          .RegisterNode("n1", "n1:1", {{{98, 2 * kMiB}}, disk_bytes_}, {dir["a"]}, later, &skipped)
          .ok());
  EXPECT_EQ(skipped, 1u);
  EXPECT_FALSE(state_.Exists("a"));
}

TEST_F(MasterStateTest, ARestartedMasterKeepsReadCountsAndTheTimeLeftOfTtls) {
  AddNode("n1", 8 * kMiB, 11);
  ASSERT_TRUE(Put("twice", 100, LeasePolicy::DeleteOnConsume(2)).ok());
  ASSERT_TRUE(Put("ttl", 100, LeasePolicy::Ttl(10s)).ok());
  Read("twice");
  // The node's directory: the latest record of each key.
  std::map<std::string, ObjectRecord> dir;
  for (const NodeDelta& d : state_.Heartbeat("n1", 0, {}, now_).deltas) {
    dir[d.record.key] = d.record;
  }
  ASSERT_EQ(dir.size(), 2u);
  EXPECT_EQ(dir["twice"].reads_done, 1u);
  ASSERT_TRUE(dir["ttl"].expires_at.has_value());
  EXPECT_EQ(*dir["ttl"].expires_at, now_ + 10s);

  MasterState fresh(Options());
  const TimePoint later = now_ + 4s;
  ObjectRecord ttl = dir["ttl"];
  ttl.expires_at = later + 6s;  // What the node reports: 6 s left.
  ASSERT_TRUE(
      fresh.RegisterNode("n1", "n1:1", {{{11, 8 * kMiB}}, 0}, {dir["twice"], ttl}, later).ok());
  auto g = fresh.GetStart("twice", "", later);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(fresh.GetEnd("twice", g->lease_id, true).ok());
  EXPECT_FALSE(fresh.Exists("twice")) << "the read before the restart counted";
  fresh.Heartbeat("n1", 0, {}, later + 7s);
  fresh.Tick(later + 7s);
  EXPECT_FALSE(fresh.Exists("ttl")) << "expired on time, not a full ttl after the restart";
}

TEST_F(MasterStateTest, HasNewsWhileDirectoryChangesAreUnacknowledged) {
  AddNode("n1", 8 * kMiB, 11);
  EXPECT_FALSE(state_.HasNews("n1", 0));
  EXPECT_TRUE(state_.HasNews("gone", 0)) << "an unknown node must hear it should register";
  ASSERT_TRUE(Put("k", 100).ok());
  EXPECT_TRUE(state_.HasNews("n1", 0));
  EXPECT_EQ(state_.Stats().unacked_changes, 1u);
  const HeartbeatReply hb = state_.Heartbeat("n1", 0, {}, now_);
  ASSERT_EQ(hb.deltas.size(), 1u);
  EXPECT_EQ(state_.Stats().unacked_changes, 1u) << "sent, not yet acknowledged";
  EXPECT_FALSE(state_.HasNews("n1", hb.deltas[0].seq));
  state_.Heartbeat("n1", hb.deltas[0].seq, {}, now_);
  EXPECT_EQ(state_.Stats().unacked_changes, 0u);
}

TEST_F(MasterStateTest, ReservedPutCommitsInOneStepAndRetriesAreOk) {
  AddNode("n1", 8 * kMiB, 11);
  PutRequest r;
  r.size = kMiB;
  auto res = state_.Reserve(r, now_);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->replicas.size(), 1u);
  EXPECT_EQ(state_.Stats().reservations, 1u);
  EXPECT_EQ(state_.Stats().used_bytes, kMiB) << "the space is held";
  EXPECT_EQ(state_.Stats().objects, 0u);

  r.key = "latent/r";
  r.request_id = "req-1";
  r.tensor = TensorMeta{"bf16", {2, 256}, {}, ""};
  r.policy = LeasePolicy::DeleteOnConsume(1);
  ASSERT_TRUE(state_.PutReserved(r, res->put_id, now_).ok());
  EXPECT_TRUE(state_.PutReserved(r, res->put_id, now_).ok()) << "a retry of a success";
  EXPECT_EQ(state_.Stats().reservations, 0u);
  EXPECT_EQ(state_.Stats().reserved_puts, 1u);
  auto read = state_.GetStart("latent/r", "", now_);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->meta.tensor, r.tensor);
  EXPECT_EQ(read->replicas[0].offset, res->replicas[0].offset) << "the reserved bytes";
  ASSERT_TRUE(state_.GetEnd("latent/r", read->lease_id, true).ok());
  EXPECT_FALSE(state_.Exists("latent/r")) << "the policy applies: consumed once";
  EXPECT_EQ(state_.Stats().used_bytes, 0u);
}

TEST_F(MasterStateTest, ReservedPutRejectsTakenKeysWrongSizesAndUnknownReservations) {
  AddNode("n1", 8 * kMiB, 11);
  ASSERT_TRUE(Put("taken", kMiB).ok());
  PutRequest r;
  r.size = kMiB;
  auto res = state_.Reserve(r, now_);
  ASSERT_TRUE(res.ok());
  r.key = "taken";
  EXPECT_EQ(state_.PutReserved(r, res->put_id, now_).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(state_.Stats().used_bytes, kMiB) << "the reservation was freed";
  r.key = "fresh";
  EXPECT_EQ(state_.PutReserved(r, res->put_id, now_).code(), StatusCode::kNotFound)
      << "a reservation is used once";
  res = state_.Reserve(r, now_);
  ASSERT_TRUE(res.ok());
  r.size = 100;
  EXPECT_EQ(state_.PutReserved(r, res->put_id, now_).code(), StatusCode::kInvalidArgument);
  r.key = "";
  EXPECT_EQ(state_.PutReserved(r, 1, now_).code(), StatusCode::kInvalidArgument);
  r.size = 0;
  EXPECT_EQ(state_.Reserve(r, now_).status().code(), StatusCode::kInvalidArgument);
  r.size = 64 * kMiB;
  EXPECT_EQ(state_.Reserve(r, now_).status().code(), StatusCode::kInvalidArgument);
  r.size = kMiB;
  r.replica_num = 2;
  EXPECT_EQ(state_.Reserve(r, now_).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(state_.Exists("fresh"));
}

TEST_F(MasterStateTest, ReservationsAreBestEffortAndExpire) {
  MasterOptions o = Options();
  o.low_watermark = 0.4;
  o.high_watermark = 0.5;
  MasterState s(o);
  ASSERT_TRUE(s.RegisterNode("n1", "n1:1", {{{11, 64 * kMiB}}, 0}, {}, now_).ok());
  PutRequest r;
  r.key = "resident";
  r.size = 31 * kMiB;
  r.policy.kind = LeaseKind::kDeleteOnConsume;
  ASSERT_TRUE(Commit(s, r, now_).ok()) << r.key;
  r.size = kMiB;
  ASSERT_TRUE(s.Reserve(r, now_).ok());
  EXPECT_EQ(s.Reserve(r, now_).status().code(), StatusCode::kResourceExhausted)
      << "no reservation past the high watermark when nothing is evictable";
  EXPECT_TRUE(s.Exists("resident")) << "an unconsumed payload is never evicted for one";
  const TimePoint later = now_ + o.reservation_timeout + 1s;
  s.Heartbeat("n1", 0, {}, later);
  s.Tick(later);
  EXPECT_EQ(s.Stats().reservations, 0u);
  EXPECT_EQ(s.Stats().used_bytes, 31 * kMiB) << "unused reservations are freed";
}

TEST_F(MasterStateTest, AReservationPastTheWatermarkLeavesEvictionToItsPut) {
  MasterOptions o = Options();
  o.low_watermark = 0.55;
  o.high_watermark = 0.75;
  MasterState s(o);
  ASSERT_TRUE(s.RegisterNode("n1", "n1:1", {{{11, 64 * kMiB}}, 0}, {}, now_).ok());
  PutRequest r;
  r.size = 8 * kMiB;
  for (const char* key : {"old", "mid", "new"}) {  // Cache policy: evictable.
    r.key = key;
    ASSERT_TRUE(Commit(s, r, now_).ok()) << r.key;
  }
  r.key = "pinned";
  r.size = 22 * kMiB;
  r.policy.kind = LeaseKind::kDeleteOnConsume;
  ASSERT_TRUE(Commit(s, r, now_).ok()) << r.key;
  ASSERT_EQ(s.Stats().used_bytes, 46 * kMiB);  // 0.72 of 64 MiB.
  r.size = 4 * kMiB;                           // 50 MiB > 48 MiB: past the high mark.
  auto res = s.Reserve(r, now_);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(s.Stats().evictions, 0u) << "nothing is evicted for the reservation itself";
  ASSERT_TRUE(s.GetStart("old", "c:1", now_).ok());  // "mid" is now the oldest unread.
  r.key = "next";
  r.policy.kind = LeaseKind::kCache;
  ASSERT_TRUE(s.PutReserved(r, res->put_id, now_).ok());
  // Its commit evicts in LRU order as of now, down to the low watermark
  // (35.2 MiB): "old" is being read, so "mid" then "new" go.
  EXPECT_TRUE(s.Exists("old"));
  EXPECT_FALSE(s.Exists("mid"));
  EXPECT_FALSE(s.Exists("new"));
  EXPECT_TRUE(s.Exists("next")) << "the put itself is never its own victim";
  EXPECT_TRUE(s.Exists("pinned"));
  EXPECT_EQ(s.Stats().evictions, 2u);
}

TEST_F(MasterStateTest, AnUnusedReservationNeverCostsAnotherObject) {
  MasterOptions o = Options();
  o.low_watermark = 0.85;
  o.high_watermark = 0.95;
  MasterState s(o);
  ASSERT_TRUE(s.RegisterNode("n1", "n1:1", {{{11, 16 * kMiB}}, 0}, {}, now_).ok());
  ASSERT_TRUE(s.RegisterNode("n2", "n2:1", {{{12, 16 * kMiB}}, 0}, {}, now_).ok());
  PutRequest r;
  r.size = 4 * kMiB;
  for (int i = 1; i <= 7; ++i) {  // 28 of 32 MiB.
    r.key = "k" + std::to_string(i);
    ASSERT_TRUE(Commit(s, r, now_).ok()) << r.key;
  }
  // A client's reservation takes the last free 4 MiB, past the high mark
  // (30.4 MiB; k1 is evictable) ...
  ASSERT_TRUE(s.Reserve(r, now_).ok());
  // ... but the client puts the long way (its reservation went stale).
  r.key = "k8";
  ASSERT_TRUE(Commit(s, r, now_).ok()) << r.key;
  EXPECT_FALSE(s.Exists("k1")) << "evicted to make room";
  for (int i = 2; i <= 8; ++i) {
    EXPECT_TRUE(s.Exists("k" + std::to_string(i))) << "the unused reservation cost k" << i;
  }
  EXPECT_EQ(s.Stats().evictions, 1u);
}

TEST_F(MasterStateTest, ReservationsYieldToPutsAndAreReleasedOnRequest) {
  AddNode("n1", 8 * kMiB, 11);
  PutRequest r;
  r.size = kMiB;
  auto held = state_.Reserve(r, now_);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(state_.Reserve(r, now_).status().code(), StatusCode::kResourceExhausted)
      << "reservations hold at most an eighth of memory";
  state_.Unreserve(held->put_id);
  state_.Unreserve(held->put_id);  // Idempotent.
  EXPECT_EQ(state_.Stats().used_bytes, 0u);
  held = state_.Reserve(r, now_);
  ASSERT_TRUE(held.ok());
  // A full store: a put reclaims a reservation past half its ttl (its
  // client no longer writes into it) before failing.
  r.size = 7 * kMiB + kMiB / 2;
  r.key = "big";
  EXPECT_EQ(state_.PutStart(r, now_).status().code(), StatusCode::kResourceExhausted)
      << "a fresh reservation is not reclaimed";
  const TimePoint later = now_ + state_.options().reservation_timeout / 2 + 1ms;
  EXPECT_TRUE(state_.PutStart(r, later).ok());
  EXPECT_EQ(state_.Stats().reservations, 0u);
}

TEST_F(MasterStateTest, ALostNodeTakesItsReservationsWithIt) {
  AddNode("n1", 8 * kMiB, 11);
  AddNode("n2", 8 * kMiB, 12);
  PutRequest r;
  r.size = kMiB;
  r.replica_num = 2;
  auto res = state_.Reserve(r, now_);
  ASSERT_TRUE(res.ok());
  const TimePoint later = now_ + state_.options().node_timeout + 1s;
  state_.Heartbeat("n2", 0, {}, later);
  state_.Tick(later);
  EXPECT_EQ(state_.Stats().reservations, 0u);
  EXPECT_EQ(state_.Stats().used_bytes, 0u) << "the surviving replica's space is freed too";
  r.key = "k";
  EXPECT_EQ(state_.PutReserved(r, res->put_id, later).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::internal
