// For the orchestrator service's tests: fake stage workers over gRPC, an
// in-process store, and a fixture that starts an orchestrator with an HTTP
// client.
#ifndef SLUICE_TESTS_INTEGRATION_ORCHESTRATOR_FIXTURE_H_
#define SLUICE_TESTS_INTEGRATION_ORCHESTRATOR_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "sluice/orchestrator/server.h"
#include "sluice/store/client.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"

#include "common/call_mac.h"
#include "common/testing/eventually.h"
#include "common/testing/free_port.h"
#include "media/frames_archive.h"
#include "media/png.h"
#include "orchestrator/core/model.h"
#include "orchestrator/core/worker_session.h"
#include "proto/orchestrator/v1/orchestrator.grpc.pb.h"

namespace sluice::testing {

using namespace std::chrono_literals;
namespace pb = ::sluice::orchestrator::v1;
using nlohmann::json;

// A w x h RGB PNG, row y filled with shade + y.
inline std::string Png(int w, int h, unsigned char shade) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) {
    rgb[i] = static_cast<std::uint8_t>(shade + i / (static_cast<std::size_t>(w) * 3));
  }
  return *media::EncodePng(rgb.data(), w, h);
}

// A stage worker: registers, heartbeats, and answers RUN with Done whose
// output is "<stage>(<input or prompt>)". `hold` keeps assignments without
// answering (a worker that hangs).
class FakeWorker {
 public:
  // `keys` (optional) stores the output and returns its store keys.
  // (Clients know jobs by unguessable names: tests key payloads by prompt.)
  using KeysFn =
      std::function<std::vector<std::string>(std::uint64_t job, const std::string& prompt)>;
  // What a decode (final) stage returns: (output, content type) for the
  // job's request (null: a text naming the stages it ran through).
  using OutputFn = std::function<std::pair<std::string, std::string>(const json& request)>;
  // `model` and `pipeline` ("prep,denoise:admission"): what it registers
  // for (empty: the default model, the standard pipeline). `final_output`
  // is in place before it registers, so its first job already sees it.
  FakeWorker(const std::string& endpoint, const std::string& stage, bool hold = false,
             KeysFn keys = nullptr, std::string model = {}, std::string pipeline = {},
             OutputFn final_output = nullptr)
      : stage_(stage),
        hold_(hold),
        keys_(std::move(keys)),
        model_(std::move(model)),
        pipeline_(std::move(pipeline)),
        final_output_(std::move(final_output)) {
    stub_ = pb::Orchestrator::NewStub(
        grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
    EXPECT_TRUE(Register());
    reader_ = std::thread([this] { Read(); });
    beater_ = std::thread([this] { Beat(); });
  }
  ~FakeWorker() { Kill(); }

  // Stops heartbeating and drops the stream, like a dead process.
  void Kill() {
    if (dead_.exchange(true)) {
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stream_ctx_ != nullptr) {
        stream_ctx_->TryCancel();
      }
    }
    reader_.join();
    beater_.join();
  }
  int runs() const { return runs_; }
  int stops() const { return stops_; }
  // A video's decode reports its first output only after its result (the
  // report that lands in the heartbeat after Done). Call before submitting.
  void ReportFirstOutputAfterDone() { first_output_after_done_ = true; }
  // A denoise reports its progress (and a first output, as a stage whose
  // previews are outputs would) and its timings in its Done, with no
  // heartbeat before it.
  // Call before submitting.
  void ReportProgressInDone() { progress_in_done_ = true; }
  // Replaces what a decode (final) stage returns. Call before submitting
  // the jobs it should see.
  void SetFinalOutput(OutputFn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    final_output_ = std::move(fn);
  }

 private:
  bool Register() {
    pb::RegisterRequest req;
    req.set_stage(stage_);
    if (!model_.empty()) {
      req.add_models(model_);
    }
    if (!pipeline_.empty()) {
      Result<std::vector<orchestrator::StageDecl>> stages = orchestrator::ParsePipeline(pipeline_);
      EXPECT_TRUE(stages.ok()) << stages.status().ToString();
      for (std::size_t i = 0; stages.ok() && i < stages->size(); ++i) {
        pb::StageDecl* d = req.add_pipeline();
        d->set_name((*stages)[i].name);
        d->set_admission((*stages)[i].kind == orchestrator::StageKind::kAdmission);
        d->set_progress_weight(static_cast<std::uint32_t>((*stages)[i].progress_weight));
      }
    }
    req.set_capacity(2);
    req.set_name("fake-" + stage_);
    pb::RegisterResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 2s);
    if (!stub_->Register(&ctx, req, &resp).ok()) {
      return false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    id_ = resp.worker_id();
    secret_ = resp.session_secret();
    return true;
  }

  // Signs `ctx` as this worker's registration (worker_session.h).
  void Prove(grpc::ClientContext& ctx, std::string_view method) {
    std::lock_guard<std::mutex> lock(mu_);
    ctx.AddMetadata(orchestrator::kWorkerMacMetadataKey,
                    internal::SignCall(secret_, method, internal::UnixMillis()));
  }

  // Reads assignments; when the stream ends (the orchestrator restarted or
  // declared this worker lost), registers again and reopens it.
  void Read() {
    while (!dead_) {
      pb::AssignmentsRequest req;
      req.set_worker_id(id_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        stream_ctx_ = std::make_unique<grpc::ClientContext>();
      }
      Prove(*stream_ctx_, orchestrator::worker_method::kAssignments);
      auto reader = stub_->Assignments(stream_ctx_.get(), req);
      pb::Assignment a;
      while (reader->Read(&a)) {
        Handle(a);
      }
      (void)reader->Finish();
      while (!dead_) {
        std::this_thread::sleep_for(50ms);
        if (Register()) {
          break;
        }
      }
    }
  }

  void Handle(const pb::Assignment& a) {
    if (a.kind() == pb::Assignment::STOP) {
      ++stops_;
      return;
    }
    if (a.kind() != pb::Assignment::RUN) {
      return;
    }
    ++runs_;
    if (hold_) {
      if (stage_ == "denoise") {
        // A worker that got to a checkpointed step 4, then hangs.
        pb::HeartbeatRequest hb;
        hb.set_worker_id(id_);
        auto* p = hb.add_progress();
        p->set_job_id(a.job_id());
        p->set_step(4);
        p->set_steps(10);
        p->set_checkpointed(true);
        pb::HeartbeatResponse hr;
        grpc::ClientContext hctx;
        Prove(hctx, orchestrator::worker_method::kHeartbeat);
        (void)stub_->Heartbeat(&hctx, hb, &hr);
      }
      return;
    }
    const json request = json::parse(a.request_json());
    const bool video = request.contains("frames");
    const bool late_first_output = stage_ == "decode" && video && first_output_after_done_;
    pb::DoneRequest d;
    if (stage_ == "denoise" && progress_in_done_) {
      auto* p = d.add_progress();
      p->set_job_id(a.job_id());
      p->set_step(5);
      p->set_steps(10);
      d.set_first_output(true);
      // Where its time went; two entries the orchestrator must drop.
      (*d.mutable_timings_ms())["run"] = 12.5;
      (*d.mutable_timings_ms())["input"] = 1.5;
      (*d.mutable_timings_ms())["Bad-Name"] = 3;
      (*d.mutable_timings_ms())["output"] = -1;
    } else if (stage_ == "denoise" || (stage_ == "decode" && video && !late_first_output)) {
      pb::HeartbeatRequest hb;
      hb.set_worker_id(id_);
      hb.set_free_slots(1);
      if (stage_ == "denoise") {
        // A job keeping its checkpoints kept steps 2 and 4.
        const bool keep = request.value("keep_checkpoints", false);
        for (int step : keep ? std::vector<int>{2, 4, 5} : std::vector<int>{5}) {
          auto* p = hb.add_progress();
          p->set_job_id(a.job_id());
          p->set_step(static_cast<std::uint32_t>(step));
          p->set_steps(10);
          p->set_checkpointed(step != 5);
        }
      } else {
        hb.add_first_output(a.job_id());
      }
      pb::HeartbeatResponse hr;
      grpc::ClientContext hctx;
      Prove(hctx, orchestrator::worker_method::kHeartbeat);
      (void)stub_->Heartbeat(&hctx, hb, &hr);
    }
    std::string in = a.input();
    if (in.empty()) {
      in = request["prompt"].get<std::string>();
    }
    d.set_worker_id(id_);
    d.set_job_id(a.job_id());
    d.set_output(stage_ + "(" + in + ")");
    d.set_output_type("text/plain");
    if (video && stage_ == "decode") {
      // Frames the orchestrator muxes into an MP4 (or serves as they are).
      d.set_output(media::WriteFramesTar({Png(32, 24, 10), Png(32, 24, 90), Png(32, 24, 170)}));
      d.set_output_type(std::string(media::kFramesArchiveType));
    }
    OutputFn final_output;
    {
      std::lock_guard<std::mutex> lock(mu_);
      final_output = final_output_;
    }
    if (final_output && stage_ == "decode") {
      auto [output, type] = final_output(request);
      d.set_output(std::move(output));
      d.set_output_type(std::move(type));
    }
    if (keys_) {
      for (const std::string& k : keys_(a.job_id(), request["prompt"].get<std::string>())) {
        d.add_payload_keys(k);
      }
    }
    pb::DoneResponse dr;
    grpc::ClientContext dctx;
    Prove(dctx, orchestrator::worker_method::kDone);
    (void)stub_->Done(&dctx, d, &dr);
    if (late_first_output) {
      pb::HeartbeatRequest hb;
      hb.set_worker_id(id_);
      hb.add_first_output(a.job_id());
      pb::HeartbeatResponse hr;
      grpc::ClientContext hctx;
      Prove(hctx, orchestrator::worker_method::kHeartbeat);
      (void)stub_->Heartbeat(&hctx, hb, &hr);
    }
  }
  void Beat() {
    while (!dead_) {
      pb::HeartbeatRequest hb;
      hb.set_worker_id(id_);
      hb.set_free_slots(static_cast<std::uint32_t>(std::max(0, 2 - (hold_ ? runs_.load() : 0))));
      pb::HeartbeatResponse hr;
      grpc::ClientContext ctx;
      Prove(ctx, orchestrator::worker_method::kHeartbeat);
      if (stub_->Heartbeat(&ctx, hb, &hr).ok() && hr.reregister()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (stream_ctx_ != nullptr) {
          stream_ctx_->TryCancel();  // Read() registers again.
        }
      }
      std::this_thread::sleep_for(100ms);
    }
  }

  std::string stage_;
  bool hold_;
  KeysFn keys_;
  std::string model_, pipeline_;
  std::unique_ptr<pb::Orchestrator::Stub> stub_;
  std::atomic<std::uint64_t> id_{0};
  std::mutex mu_;
  std::unique_ptr<grpc::ClientContext> stream_ctx_;  // Guarded by mu_.
  std::string secret_;                               // Guarded by mu_: id_'s session.
  OutputFn final_output_;                            // Guarded by mu_.
  std::atomic<bool> dead_{false};
  std::atomic<bool> first_output_after_done_{false};
  std::atomic<bool> progress_in_done_{false};
  std::atomic<int> runs_{0}, stops_{0};
  std::thread reader_, beater_;
};

// An in-process store (master, one 16 MiB node, a client) for the
// orchestrator's store wiring. Members go in reverse order: client, node,
// engines, master.
struct InProcessStore {
  std::unique_ptr<MasterServer> master;
  std::unique_ptr<TransferEngine> node_engine, client_engine;
  std::unique_ptr<StoreNode> node;
  std::unique_ptr<StoreClient> client;
  // How long the client's calls keep asking the master (StoreClientConfig).
  std::chrono::milliseconds master_retry{30000};

  // Empty once the node is registered, else what failed.
  std::string Start(const MasterConfig& mc) {
    auto m = MasterServer::Start(mc);
    auto ne = TransferEngine::Create(EngineConfig{});
    auto ce = TransferEngine::Create(EngineConfig{});
    if (!m.ok() || !ne.ok() || !ce.ok()) {
      return "master or engines did not start";
    }
    master = std::move(*m);
    node_engine = std::move(*ne);
    client_engine = std::move(*ce);
    StoreNodeConfig nc;
    nc.master = master->endpoint();
    nc.memory_bytes = 16 << 20;
    auto n = StoreNode::Start(node_engine.get(), nc);
    StoreClientConfig cc;
    cc.master = master->endpoint();
    cc.staging_bytes = 1 << 20;
    cc.master_retry = master_retry;
    auto c = StoreClient::Create(client_engine.get(), cc);
    if (!n.ok() || !c.ok()) {
      return (n.ok() ? c.status() : n.status()).ToString();
    }
    node = std::move(*n);
    client = std::move(*c);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!node->registered() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    return node->registered() ? "" : "the node did not register";
  }
};

class OrchestratorTest : public ::testing::Test {
 protected:
  void Start(std::size_t max_queued = 64, std::string journal = "", std::string listen = "",
             std::string http = "") {
    OrchestratorConfig c;
    c.max_queued_jobs = max_queued;
    c.journal_path = std::move(journal);
    c.store_master = store_master_;
    // Ports a restart can take again (see FreeLoopbackPort).
    c.listen = !listen.empty() ? listen : internal::FreeLoopbackEndpoint();
    c.http_listen = !listen.empty() ? http : internal::FreeLoopbackEndpoint();
    c.heartbeat_interval = 100ms;
    c.worker_timeout = 1500ms;
    c.sync_timeout = 20s;
    // Fake workers return placeholder bytes ("decode(denoise(...))"); the
    // output checks have tests of their own (OutputCheckTest).
    c.check_outputs = false;
    if (configure_) {
      configure_(c);
    }
    auto s = OrchestratorServer::Start(c);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    http_ = std::make_unique<httplib::Client>("http://" + server_->http_endpoint());
    http_->set_read_timeout(30, 0);
  }
  json Post(const std::string& body, int* status) {
    auto r = http_->Post("/v1/images/generations", body, "application/json");
    EXPECT_TRUE(r);
    *status = r ? r->status : -1;
    return r ? json::parse(r->body, nullptr, false) : json();
  }
  // Submits a video job (POST /v1/videos, `body`); its id, or "" (a
  // failed expectation) when it was not accepted.
  std::string PostVideo(const std::string& body) {
    auto r = http_->Post("/v1/videos", body, "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r ? r->status : -1, 200) << (r ? r->body : "");
    return r && r->status == 200 ? json::parse(r->body).value("id", "") : "";
  }
  // Whether job `id` reports step `step` within 10 s (its last view
  // printed when not).
  ::testing::AssertionResult WaitStep(const std::string& id, int step) {
    json j;
    if (internal::Eventually(
            [&] {
              j = json::parse(http_->Get("/v1/jobs/" + id)->body, nullptr, false);
              return j.is_object() && j["progress"]["step"] == step;
            },
            10s)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "step " << step << " not reached: " << j.dump();
  }
  json WaitStatus(const std::string& id, const std::string& want) {
    json j;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = http_->Get("/v1/jobs/" + id);
      j = json::parse(r->body, nullptr, false);
      if (j.value("status", "") == want) {
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    return j;
  }

  std::unique_ptr<OrchestratorServer> server_;
  std::unique_ptr<httplib::Client> http_;
  std::string store_master_;  // Passed by Start() when set.
  // Applied by Start() to the config last, when set.
  std::function<void(OrchestratorConfig&)> configure_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_INTEGRATION_ORCHESTRATOR_FIXTURE_H_
