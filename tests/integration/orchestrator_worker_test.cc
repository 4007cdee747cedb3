// The worker protocol over raw gRPC, as a misbehaving or hostile worker
// speaks it: delayed registration attempts, unregistering while the stream
// is cancelled, replaced streams, and calls under another worker's id
// without its session proof.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "base64.h"
#include "common/call_mac.h"
#include "metrics_text.h"
#include "orchestrator/core/worker_session.h"
#include "orchestrator/service/http_api.h"
#include "orchestrator_fixture.h"
#include "proto/orchestrator/v1/orchestrator.grpc.pb.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
namespace pb = ::sluice::orchestrator::v1;

// A registration made over raw gRPC: its worker id (0 when refused) and
// session secret.
struct RawSession {
  std::uint64_t id = 0;
  std::string secret;

  // Signs `ctx` as this registration's call of `method`.
  void Prove(grpc::ClientContext& ctx, std::string_view method) const {
    ctx.AddMetadata(orchestrator::kWorkerMacMetadataKey,
                    internal::SignCall(secret, method, internal::UnixMillis()));
  }
};

// Registers an encode worker over raw gRPC.
RawSession RegisterEncodeWorker(pb::Orchestrator::Stub& stub) {
  pb::RegisterRequest reg;
  reg.set_stage("encode");
  reg.set_capacity(1);
  pb::RegisterResponse rr;
  grpc::ClientContext ctx;
  if (!stub.Register(&ctx, reg, &rr).ok()) {
    return {};
  }
  return {rr.worker_id(), rr.session_secret()};
}

// A worker's registration attempts carry its instance id and a count: one
// delayed in the network (an older attempt arriving after a newer one) is
// refused, and a newer one replaces the record the older made, so a link
// that drops and returns never leaves a phantom worker taking credits.
TEST_F(OrchestratorTest, ADelayedRegistrationAttemptLeavesNoPhantomWorker) {
  Start();
  auto stub = pb::Orchestrator::NewStub(
      grpc::CreateChannel(server_->endpoint(), grpc::InsecureChannelCredentials()));
  auto attempt = [&](std::uint64_t n, grpc::StatusCode* code) {
    pb::RegisterRequest reg;
    reg.set_stage("encode");
    reg.set_capacity(1);
    reg.set_instance(0x5eed5eed5eedull);
    reg.set_attempt(n);
    pb::RegisterResponse rr;
    grpc::ClientContext ctx;
    *code = stub->Register(&ctx, reg, &rr).error_code();
    return rr.worker_id();
  };
  auto workers = [&] {
    return MetricValue(server_->http_endpoint(),
                       "sluice_orchestrator_workers{model=\"sluice-reference\",stage=\"encode\"}");
  };
  grpc::StatusCode code;
  const std::uint64_t second = attempt(2, &code);
  ASSERT_EQ(code, grpc::StatusCode::OK);
  EXPECT_EQ(attempt(1, &code), 0u);
  EXPECT_EQ(code, grpc::StatusCode::FAILED_PRECONDITION) << "the delayed first attempt";
  EXPECT_EQ(workers(), 1);
  const std::uint64_t third = attempt(3, &code);
  ASSERT_EQ(code, grpc::StatusCode::OK);
  EXPECT_NE(third, second);
  EXPECT_EQ(workers(), 1) << "the third attempt replaced the second's record";
  EXPECT_NE(RegisterEncodeWorker(*stub).id, 0u) << "workers without an instance are unaffected";
  EXPECT_EQ(workers(), 2);
}

// A worker that unregisters and then cancels its assignment stream (what
// every stage worker does when it stops) used to have the stream finished
// twice -- once for the unregister, once for the cancel -- and gRPC aborted
// the orchestrator ("assertion failed: call_ == nullptr"). Both orders, many
// times: the orchestrator stays up and serves.
TEST_F(OrchestratorTest, AWorkerUnregisteringThenCancellingItsStreamLeavesTheOrchestratorUp) {
  Start();
  auto stub = pb::Orchestrator::NewStub(
      grpc::CreateChannel(server_->endpoint(), grpc::InsecureChannelCredentials()));
  // The cancel goes out while the unregister is in flight, at a delay that
  // sweeps the window between the orchestrator ending the stream and gRPC
  // sending its status.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (int i = 0; i < 600 && std::chrono::steady_clock::now() < deadline; ++i) {
    const RawSession worker = RegisterEncodeWorker(*stub);
    ASSERT_NE(worker.id, 0u);
    pb::AssignmentsRequest areq;
    areq.set_worker_id(worker.id);
    grpc::ClientContext sctx;
    worker.Prove(sctx, orchestrator::worker_method::kAssignments);
    auto reader = stub->Assignments(&sctx, areq);
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // Attached.
    std::thread unregister([&] {
      pb::UnregisterRequest ureq;
      ureq.set_worker_id(worker.id);
      pb::UnregisterResponse uresp;
      grpc::ClientContext uctx;
      worker.Prove(uctx, orchestrator::worker_method::kUnregister);
      (void)stub->Unregister(&uctx, ureq, &uresp);
    });
    std::this_thread::sleep_for(std::chrono::microseconds(7 * (i % 60)));
    sctx.TryCancel();
    unregister.join();
    (void)reader->Finish();
  }
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode");
  int status = 0;
  json j = Post(R"({"prompt":"still up"})", &status);
  ASSERT_EQ(status, 200) << j.dump();
  EXPECT_EQ(Unbase64(j["data"][0]["b64_json"]), "decode(denoise(encode(still up)))");
}

// A worker's calls prove its registration's session secret: holding the
// cluster credential and another worker's id is not enough to take its
// stream, beat for it, report for it or unregister it; ids are random.
TEST_F(OrchestratorTest, AWorkerCannotActAsAnother) {
  Start();
  auto stub = pb::Orchestrator::NewStub(
      grpc::CreateChannel(server_->endpoint(), grpc::InsecureChannelCredentials()));
  const RawSession a = RegisterEncodeWorker(*stub), b = RegisterEncodeWorker(*stub);
  ASSERT_NE(a.id, 0u);
  ASSERT_NE(b.id, 0u);
  EXPECT_NE(b.id, a.id + 1) << "worker ids are not sequential";
  EXPECT_EQ(a.secret.size(), 32u);
  EXPECT_NE(a.secret, b.secret);
  // Each call names b's id: unsigned, or signed with a's secret.
  auto heartbeat = [&](const RawSession* signer, std::string* why) {
    pb::HeartbeatRequest hb;
    hb.set_worker_id(b.id);
    pb::HeartbeatResponse hr;
    grpc::ClientContext ctx;
    if (signer != nullptr) {
      signer->Prove(ctx, orchestrator::worker_method::kHeartbeat);
    }
    const grpc::Status st = stub->Heartbeat(&ctx, hb, &hr);
    *why = st.error_message();
    return st.error_code();
  };
  std::string why;
  EXPECT_EQ(heartbeat(nullptr, &why), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(why.find("no session proof"), std::string::npos) << why;
  EXPECT_EQ(heartbeat(&a, &why), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(why.find("a wrong session secret"), std::string::npos) << why;
  {
    pb::AssignmentsRequest areq;
    areq.set_worker_id(b.id);
    grpc::ClientContext sctx;
    a.Prove(sctx, orchestrator::worker_method::kAssignments);
    auto reader = stub->Assignments(&sctx, areq);
    pb::Assignment got;
    EXPECT_FALSE(reader->Read(&got));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    pb::FailedRequest f;
    f.set_worker_id(b.id);
    f.set_job_id(1);
    pb::FailedResponse fr;
    grpc::ClientContext ctx;
    a.Prove(ctx, orchestrator::worker_method::kFailed);
    EXPECT_EQ(stub->Failed(&ctx, f, &fr).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    pb::UnregisterRequest u;
    u.set_worker_id(b.id);
    pb::UnregisterResponse ur;
    grpc::ClientContext ctx;
    a.Prove(ctx, orchestrator::worker_method::kDone);  // b's secret is not a's.
    EXPECT_EQ(stub->Unregister(&ctx, u, &ur).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // A proof of b's own is taken once, for its method only.
  pb::HeartbeatRequest hb;
  hb.set_worker_id(b.id);
  hb.set_free_slots(1);
  pb::HeartbeatResponse hr;
  grpc::ClientContext ok_ctx;
  const std::string proof =
      internal::SignCall(b.secret, orchestrator::worker_method::kHeartbeat, internal::UnixMillis());
  ok_ctx.AddMetadata(orchestrator::kWorkerMacMetadataKey, proof);
  ASSERT_TRUE(stub->Heartbeat(&ok_ctx, hb, &hr).ok());
  EXPECT_FALSE(hr.reregister()) << "b is still registered";
  grpc::ClientContext replay;
  replay.AddMetadata(orchestrator::kWorkerMacMetadataKey, proof);
  const grpc::Status replayed = stub->Heartbeat(&replay, hb, &hr);
  EXPECT_EQ(replayed.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(replayed.error_message().find("replayed"), std::string::npos)
      << replayed.error_message();
  EXPECT_EQ(MetricValue(server_->http_endpoint(),
                        "sluice_orchestrator_workers{model=\"sluice-reference\",stage=\"encode\"}"),
            2)
      << "no impersonating call declared b lost";
}

// A worker whose assignment stream is replaced by a newer one (it
// reconnected) keeps the newer one when the old one ends: the old stream's
// end used to detach the worker, whose assignments then queued unsent.
TEST_F(OrchestratorTest, AnOldAssignmentStreamEndingLeavesTheNewerOneAttached) {
  Start();
  auto stub = pb::Orchestrator::NewStub(
      grpc::CreateChannel(server_->endpoint(), grpc::InsecureChannelCredentials()));
  const RawSession worker = RegisterEncodeWorker(*stub);
  ASSERT_NE(worker.id, 0u);
  pb::AssignmentsRequest areq;
  areq.set_worker_id(worker.id);
  grpc::ClientContext old_ctx, new_ctx;
  old_ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  new_ctx.set_deadline(std::chrono::system_clock::now() + 15s);
  worker.Prove(old_ctx, orchestrator::worker_method::kAssignments);
  worker.Prove(new_ctx, orchestrator::worker_method::kAssignments);
  auto old_reader = stub->Assignments(&old_ctx, areq);
  std::this_thread::sleep_for(200ms);  // Attached first.
  auto new_reader = stub->Assignments(&new_ctx, areq);
  // The replaced stream is ended by the orchestrator.
  pb::Assignment a;
  EXPECT_FALSE(old_reader->Read(&a));
  EXPECT_EQ(old_reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  std::atomic<bool> beating{true};
  std::thread beater([&] {
    while (beating) {
      pb::HeartbeatRequest hb;
      hb.set_worker_id(worker.id);
      hb.set_free_slots(1);
      pb::HeartbeatResponse hr;
      grpc::ClientContext ctx;
      worker.Prove(ctx, orchestrator::worker_method::kHeartbeat);
      (void)stub->Heartbeat(&ctx, hb, &hr);
      std::this_thread::sleep_for(100ms);
    }
  });
  int status = 0;
  const std::string id = Post(R"({"prompt":"to the new stream","async":true})", &status)["id"];
  ASSERT_EQ(status, 202);
  const bool got = new_reader->Read(&a);
  beating = false;
  beater.join();
  ASSERT_TRUE(got) << "the newer stream got no assignment";
  EXPECT_EQ(a.kind(), pb::Assignment::RUN);
  new_ctx.TryCancel();
  (void)new_reader->Finish();
}

// A worker declares the size its model was trained at: a request for that
// model without a size gets it (it got the front's 256x256 before), one
// with a size keeps its own, another model keeps the front's default; a
// malformed declaration is refused naming the field.
TEST_F(OrchestratorTest, AModelsDeclaredSizeIsWhatItsRequestsWithoutOneGet) {
  Start();
  auto stub = pb::Orchestrator::NewStub(
      grpc::CreateChannel(server_->endpoint(), grpc::InsecureChannelCredentials()));
  auto declare = [&](const std::string& image, const std::string& video) {
    pb::RegisterRequest reg;
    reg.set_stage("encode");
    reg.set_capacity(1);
    reg.set_image_size(image);
    reg.set_video_size(video);
    pb::RegisterResponse rr;
    grpc::ClientContext ctx;
    return stub->Register(&ctx, reg, &rr);
  };
  for (const auto& [image, video] : std::vector<std::pair<std::string, std::string>>{
           {"100x100", ""}, {"128", ""}, {"128x128x1", ""}, {"", "4096x128"}}) {
    const grpc::Status st = declare(image, video);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << image << " " << video;
    EXPECT_NE(st.error_message().find(std::string(image.empty() ? "video" : "image") +
                                      "_size: WIDTHxHEIGHT, each 64..2048"),
              std::string::npos)
        << st.error_message();
  }
  ASSERT_TRUE(declare("128x96", "160x128").ok());

  // The decode stage answers with the size its request carries.
  auto echo = [](const json& request) {
    return std::pair<std::string, std::string>{request.value("size", "?"), "text/plain"};
  };
  FakeWorker e(server_->endpoint(), "encode"), d(server_->endpoint(), "denoise"),
      v(server_->endpoint(), "decode", false, nullptr, {}, {}, echo);
  auto size_of = [&](const std::string& body) {
    int status = 0;
    const json j = Post(body, &status);
    EXPECT_EQ(status, 200) << j.dump();
    return status == 200 ? Unbase64(j["data"][0]["b64_json"].get<std::string>()) : "";
  };
  EXPECT_EQ(size_of(R"({"prompt":"p"})"), "128x96");
  EXPECT_EQ(size_of(R"({"prompt":"p","size":"256x192"})"), "256x192");

  orchestrator::HttpOptions o;
  bool async = false;
  auto parsed_size = [&](const char* body, const char* kind) {
    auto r = orchestrator::ParseGenerationRequest(
        body, kind, o, &async, [](const std::string& m) { return m == "m" ? "64x64" : ""; });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? json::parse(r->request_json).value("size", "") : "";
  };
  EXPECT_EQ(parsed_size(R"({"prompt":"p","model":"m"})", "video"), "64x64");
  EXPECT_EQ(parsed_size(R"({"prompt":"p","model":"n"})", "video"), "320x192");
  EXPECT_EQ(parsed_size(R"({"prompt":"p"})", "image"), "256x256");
}

}  // namespace
}  // namespace sluice::testing
