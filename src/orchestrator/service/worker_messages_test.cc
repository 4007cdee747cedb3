// The worker protocol's messages to the state's plain reports and back.
#include "orchestrator/service/worker_messages.h"

#include "gtest/gtest.h"

namespace sluice::orchestrator {
namespace {

TEST(WorkerMessagesTest, AHeartbeatCarriesEveryField) {
  v1::HeartbeatRequest m;
  m.set_worker_id(7);
  m.set_free_slots(3);
  v1::StepProgress* p = m.add_progress();
  p->set_job_id(11);
  p->set_step(4);
  p->set_steps(20);
  p->set_checkpointed(true);
  p->set_preview("\x89PNG....");
  p->set_preview_step(4);
  m.add_first_output(12);
  m.set_draining(true);
  v1::CacheCounters* c = m.add_caches();
  c->set_kind("condition");
  c->set_lookups(9);
  c->set_hits(5);
  c->set_misses(4);
  c->set_computes(4);
  c->set_single_flight_waits(2);
  c->set_takeovers(1);
  c->set_bytes_inserted(4096);
  v1::TransportCounters* t = m.add_transports();
  t->set_transport("tcp");
  t->set_bytes_read(100);
  t->set_bytes_written(200);

  const HeartbeatReport r = FromWire(m);
  EXPECT_EQ(r.worker, 7u);
  EXPECT_EQ(r.free_slots, 3u);
  ASSERT_EQ(r.progress.size(), 1u);
  EXPECT_EQ(r.progress[0].job, 11u);
  EXPECT_EQ(r.progress[0].step, 4u);
  EXPECT_EQ(r.progress[0].steps, 20u);
  EXPECT_TRUE(r.progress[0].checkpointed);
  EXPECT_EQ(r.progress[0].preview, "\x89PNG....");
  EXPECT_EQ(r.progress[0].preview.data(), m.progress(0).preview().data()) << "copied";
  EXPECT_EQ(r.progress[0].preview_step, 4u);
  EXPECT_EQ(r.first_output, std::vector<JobId>{12});
  EXPECT_FALSE(r.reports.has_value()) << "absent from a worker that does not count";
  EXPECT_TRUE(r.draining);
  ASSERT_EQ(r.caches.size(), 1u);
  EXPECT_EQ(r.caches[0].kind, "condition");
  EXPECT_EQ(r.caches[0].lookups, 9u);
  EXPECT_EQ(r.caches[0].hits, 5u);
  EXPECT_EQ(r.caches[0].misses, 4u);
  EXPECT_EQ(r.caches[0].computes, 4u);
  EXPECT_EQ(r.caches[0].single_flight_waits, 2u);
  EXPECT_EQ(r.caches[0].takeovers, 1u);
  EXPECT_EQ(r.caches[0].bytes_inserted, 4096u);
  ASSERT_EQ(r.transports.size(), 1u);
  EXPECT_EQ(r.transports[0].transport, "tcp");
  EXPECT_EQ(r.transports[0].bytes_read, 100u);
  EXPECT_EQ(r.transports[0].bytes_written, 200u);

  m.set_reports(0);
  EXPECT_EQ(FromWire(m).reports, std::optional<std::uint64_t>(0)) << "zero is a count";
}

TEST(WorkerMessagesTest, ADoneReportViewsTheOutputItCameWith) {
  v1::DoneRequest m;
  m.set_worker_id(3);
  m.set_job_id(9);
  m.set_output(std::string(1 << 16, 'o'));
  m.set_output_type("image/png");
  m.add_payload_keys("k1");
  m.add_payload_keys("k2");
  m.add_progress()->set_job_id(9);
  m.set_first_output(true);
  (*m.mutable_timings_ms())["denoise"] = 12.5;

  const DoneReport r = FromWire(m);
  EXPECT_EQ(r.worker, 3u);
  EXPECT_EQ(r.job, 9u);
  EXPECT_EQ(r.output.data(), m.output().data()) << "a result's bytes are not copied";
  EXPECT_EQ(r.output.size(), std::size_t{1} << 16);
  EXPECT_EQ(r.output_type, "image/png");
  EXPECT_EQ(r.payload_keys, (std::vector<std::string>{"k1", "k2"}));
  ASSERT_EQ(r.progress.size(), 1u);
  EXPECT_EQ(r.progress[0].job, 9u);
  EXPECT_TRUE(r.first_output);
  EXPECT_EQ(r.timings_ms, (std::map<std::string, double>{{"denoise", 12.5}}));
  EXPECT_FALSE(r.held.has_value()) << "no report of what it holds";

  m.set_reports_held(true);
  EXPECT_EQ(FromWire(m).held, std::vector<std::string>{}) << "it holds nothing now";
  m.add_held("adapter=a");
  m.add_held("adapter=b");
  EXPECT_EQ(FromWire(m).held, (std::vector<std::string>{"adapter=a", "adapter=b"}));
}

TEST(WorkerMessagesTest, AFailuresCodeDecidesWhetherItIsRetried) {
  v1::FailedRequest m;
  m.set_worker_id(1);
  m.set_job_id(2);
  m.set_reason("out of memory");

  // A worker from before codes: its own word.
  m.set_retryable(true);
  FailedReport r = FromWire(m);
  EXPECT_EQ(r.worker, 1u);
  EXPECT_EQ(r.job, 2u);
  EXPECT_EQ(r.reason, "out of memory");
  EXPECT_TRUE(r.retryable);
  EXPECT_EQ(r.code, StatusCode::kInternal);
  m.set_retryable(false);
  EXPECT_FALSE(FromWire(m).retryable);

  // With a code, the code decides (its `retryable` is ignored).
  m.set_retryable(true);
  for (const auto& [code, retryable] :
       std::vector<std::pair<StatusCode, bool>>{{StatusCode::kUnavailable, true},
                                                {StatusCode::kResourceExhausted, true},
                                                {StatusCode::kInvalidArgument, false},
                                                {StatusCode::kNotFound, false}}) {
    m.set_code(static_cast<std::uint32_t>(code));
    r = FromWire(m);
    EXPECT_EQ(r.code, code);
    EXPECT_EQ(r.retryable, retryable) << static_cast<int>(code);
  }
  m.set_code(999);
  r = FromWire(m);
  EXPECT_EQ(r.code, StatusCode::kInternal) << "an unknown code";
  EXPECT_FALSE(r.retryable);

  m.set_code(0);
  m.set_preempted(true);
  EXPECT_TRUE(FromWire(m).preempted);
}

TEST(WorkerMessagesTest, AnOrderOfEachKindGoesOnTheWire) {
  AssignmentOrder a;
  a.kind = AssignmentOrder::Kind::kRun;
  a.job = 5;
  a.job_name = "job-0123abcd";
  a.stage = "denoise";
  a.model = "sluice-reference";
  a.resume_step = 8;
  a.request_json = R"({"prompt":"a red circle"})";
  a.input = "descriptor";
  v1::Assignment m = ToWire(a);
  EXPECT_EQ(m.kind(), v1::Assignment::RUN);
  EXPECT_EQ(m.job_id(), 5u);
  EXPECT_EQ(m.job_name(), "job-0123abcd");
  EXPECT_EQ(m.stage(), "denoise");
  EXPECT_EQ(m.model(), "sluice-reference");
  EXPECT_EQ(m.resume_step(), 8u);
  EXPECT_EQ(m.request_json(), a.request_json);
  EXPECT_EQ(m.input(), "descriptor");
  EXPECT_EQ(m.priority(), v1::Assignment::STANDARD);
  a.priority = PriorityClass::kInteractive;
  EXPECT_EQ(ToWire(a).priority(), v1::Assignment::INTERACTIVE);
  a.priority = PriorityClass::kBatch;
  EXPECT_EQ(ToWire(a).priority(), v1::Assignment::BATCH);

  a.kind = AssignmentOrder::Kind::kStop;
  EXPECT_EQ(ToWire(a).kind(), v1::Assignment::STOP);
  a.kind = AssignmentOrder::Kind::kCheckpoint;
  EXPECT_EQ(ToWire(a).kind(), v1::Assignment::CHECKPOINT);
}

}  // namespace
}  // namespace sluice::orchestrator
