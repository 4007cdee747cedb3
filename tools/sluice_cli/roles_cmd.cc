// `sluice master`, `store-node`, `orchestrator` and `worker`: the roles of a
// cluster, each running until SIGTERM/SIGINT (or stdin closing).
#include <atomic>
#include <charconv>
#include <iostream>
#include <memory>

#include "sluice/orchestrator/server.h"
#include "sluice/runtime/reference_stages.h"
#include "sluice/store/master.h"
#include "sluice/store/store_node.h"
#include "sluice/units.h"

#include "common/net.h"
#include "sluice_cli/autoscale_flags.h"
#include "sluice_cli/commands.h"
#include "sluice_cli/etcd_flags.h"
#include "sluice_cli/http_flags.h"
#include "sluice_cli/role_metrics.h"
#include "sluice_cli/security_flags.h"
#include "sluice_cli/serve.h"
#include "sluice_cli/signals.h"

namespace sluice::cli {
namespace {

constexpr const char* kExitOnEofHelp = "stop when stdin closes (for supervisors)";

constexpr const char* kAdvertiseHelp =
    "what peers dial: HOST, HOST:PORT or [V6] (default: --listen; needed when it is 0.0.0.0 or "
    "::)";

// --host-id, applied (SetHostId) before the role's engine starts.
void AddHostIdFlag(CLI::App* cmd, std::string* id) {
  cmd->add_option("--host-id", *id,
                  "this host's id for same-host detection: roles share memory directly only "
                  "with the same kernel and host id (default: SLUICE_HOST_ID, else none)");
}
bool ApplyHostId(const char* role, const std::string& id) {
  if (id.empty()) {
    return true;
  }
  if (Status s = SetHostId(id); !s.ok()) {
    std::cerr << role << ": --host-id: " << s.message() << "\n";
    return false;
  }
  return true;
}

int RunMaster(MasterConfig config, bool exit_on_eof, const EtcdOptions& eo) {
  BlockStopSignals();
  // With etcd there are standbys: what this master acknowledges must be
  // known to the one that takes over.
  config.durable_commits = config.durable_commits || !eo.endpoints.empty();
  bool failed = false;
  std::unique_ptr<discovery::EtcdClient> etcd = ConnectEtcd("sluice master", eo, &failed);
  if (failed) {
    return 2;
  }
  // With etcd, a standby serves nothing until it leads (nodes and clients
  // find the leader there).
  std::unique_ptr<discovery::Election> lead;
  if (etcd != nullptr &&
      (lead = LeadOrStandBy("sluice master", etcd.get(), eo, "master", "")) == nullptr) {
    return 0;
  }
  auto master = MasterServer::Start(config);
  if (!master.ok()) {
    std::cerr << "sluice master: " << master.status().ToString() << "\n";
    return 1;
  }
  if (lead != nullptr) {
    if (Status s = lead->Publish((*master)->endpoint()); !s.ok()) {
      std::cerr << "sluice master: publishing in etcd: " << s.ToString() << "\n";
      return 1;
    }
  }
  std::cout << "READY master " << (*master)->endpoint() << " "
            << ((*master)->metrics_endpoint().empty() ? "-" : (*master)->metrics_endpoint())
            << std::endl;
  WaitForStopSignal(exit_on_eof);
  return 0;
}

int RunStoreNode(const std::string& listen, const std::string& advertise, StoreNodeConfig config,
                 bool exit_on_eof, const EtcdOptions& eo, int metrics_port,
                 const std::vector<std::string>& transports) {
  BlockStopSignals();
  bool failed = false;
  std::unique_ptr<discovery::EtcdClient> etcd = ConnectEtcd("sluice store-node", eo, &failed);
  if (failed || !ResolveLeader("sluice store-node", etcd.get(), eo, "master", 0, &config.master)) {
    return 2;
  }
  if (config.master.empty()) {
    std::cerr << "sluice store-node: give --master or --etcd\n";
    return 2;
  }
  if (etcd != nullptr) {
    // A standby master that took over gets this node's objects.
    config.resolve_master = LeaderResolver(std::move(etcd), eo, "master", 0);
  }
  EngineConfig ec;
  ec.listen = listen;
  ec.advertise = advertise;
  ec.transports = transports;
  ec.secret = TransferSecret(config.security);
  ec.encrypt_data = config.security.encrypt_data;
  auto engine = TransferEngine::Create(ec);
  if (!engine.ok()) {
    std::cerr << "sluice store-node: " << engine.status().ToString() << "\n";
    return 1;
  }
  // The metrics endpoint first: a port it cannot take stops the node before
  // it registers. Declared after `node`, so it stops first.
  std::unique_ptr<StoreNode> node;
  std::atomic<const StoreNode*> live{nullptr};
  Result<std::unique_ptr<internal::MetricsEndpoint>> metrics = StartRoleMetrics(
      "sluice store-node", listen, metrics_port, [&live, e = engine->get()](bool om) {
        const StoreNode* n = live.load();
        return StoreNodeMetricsText(n != nullptr ? n->Metrics() : StoreNodeMetrics{}, *e, om);
      });
  if (!metrics.ok()) {
    std::cerr << "sluice store-node: --metrics-port: " << metrics.status().message() << "\n";
    return 2;
  }
  auto started = StoreNode::Start(engine->get(), config);
  if (!started.ok()) {
    std::cerr << "sluice store-node: " << started.status().ToString() << "\n";
    return 1;
  }
  node = std::move(*started);
  live.store(node.get());
  std::cout << "READY store-node " << node->node_id() << " " << (*engine)->endpoint() << " "
            << (*metrics != nullptr ? (*metrics)->endpoint() : "-") << std::endl;
  WaitForStopSignal(exit_on_eof);
  return 0;
}

// What the orchestrator publishes in etcd: its gRPC and HTTP endpoints as
// peers dial them (`advertise`: a host, the bound ports kept). Errors name
// --advertise.
Result<std::string> PublishedEndpoints(const OrchestratorServer& orch,
                                       const std::string& advertise) {
  using internal::AdvertisedEndpoint;
  using internal::HostPort;
  using internal::ParseHostPort;
  std::string out;
  for (const std::string& ep : {orch.endpoint(), orch.http_endpoint()}) {
    SLUICE_ASSIGN_OR_RETURN(HostPort bound, ParseHostPort(ep, false));
    SLUICE_ASSIGN_OR_RETURN(std::string dialed,
                            AdvertisedEndpoint(bound, advertise, "--advertise"));
    out += (out.empty() ? "" : " ") + dialed;
  }
  return out;
}

int RunOrchestrator(OrchestratorConfig config, bool exit_on_eof, const EtcdOptions& eo,
                    bool journal_in_etcd, const std::string& advertise) {
  // The orchestrator checks adapter files against the reference model
  // and puts them in the store from the host it advertises.
  config.adapters.check = CheckReferenceAdapter;
  config.adapters.advertise = advertise;
  if (journal_in_etcd && (eo.endpoints.empty() || !config.journal_path.empty())) {
    std::cerr << "sluice orchestrator: --journal-in-etcd needs --etcd and no --journal\n";
    return 2;
  }
  BlockStopSignals();
  bool failed = false;
  std::shared_ptr<discovery::EtcdClient> etcd = ConnectEtcd("sluice orchestrator", eo, &failed);
  if (failed) {
    return 2;
  }
  if (!advertise.empty() && internal::ParseHostPort(advertise, true).ok()) {
    std::cerr << "sluice orchestrator: --advertise '" << advertise
              << "': a host only (the gRPC and HTTP ports are the bound ones)\n";
    return 2;
  }
  if (etcd != nullptr) {
    // What it will publish must be dialable: checked before campaigning.
    for (const std::string& listen : {config.listen, config.http_listen}) {
      Result<internal::HostPort> hp = internal::ParseHostPort(listen, true);
      Result<std::string> dialed = hp.ok()
                                       ? internal::AdvertisedEndpoint(*hp, advertise, "--advertise")
                                       : Result<std::string>(hp.status());
      if (!dialed.ok()) {
        std::cerr << "sluice orchestrator: " << dialed.status().message() << "\n";
        return 2;
      }
    }
  }
  // A standby takes no job until it leads: one orchestrator at a time
  // journals and schedules.
  std::unique_ptr<discovery::Election> lead;
  if (etcd != nullptr && (lead = LeadOrStandBy("sluice orchestrator", etcd.get(), eo,
                                               "orchestrator", "")) == nullptr) {
    return 0;
  }
  // The master as it is once this process leads; followed when it moves.
  if (!ResolveLeader("sluice orchestrator", etcd.get(), eo, "master", 0, &config.store_master)) {
    return 2;
  }
  if (etcd != nullptr) {
    config.resolve_store_master = LeaderResolver(etcd, eo, "master", 0);
  }
  if (journal_in_etcd) {
    // Where the next leader reads it; written only while this one leads.
    config.journal_etcd.endpoints = eo.endpoints;
    Result<discovery::EtcdSecurity> es = EtcdSecurityOf(eo);  // Checked by ConnectEtcd.
    if (es.ok()) {
      config.journal_etcd.ca_file = es->ca_file;
      config.journal_etcd.cert_file = es->cert_file;
      config.journal_etcd.key_file = es->key_file;
      config.journal_etcd.user = es->user;
      config.journal_etcd.password = es->password;
    }
    config.journal_etcd.prefix = discovery::RoleKey(eo.cluster, "orchestrator") + "/journal/";
    config.journal_etcd.leader_key = lead->key();
    config.journal_etcd.leader_lease = lead->lease();
  }
  auto orch = OrchestratorServer::Start(config);
  if (!orch.ok()) {
    std::cerr << "sluice orchestrator: " << orch.status().ToString() << "\n";
    return 1;
  }
  if (lead != nullptr) {
    Result<std::string> published = PublishedEndpoints(**orch, advertise);
    if (!published.ok()) {
      std::cerr << "sluice orchestrator: " << published.status().message() << "\n";
      return 2;
    }
    if (Status s = lead->Publish(*published); !s.ok()) {
      std::cerr << "sluice orchestrator: publishing in etcd: " << s.ToString() << "\n";
      return 1;
    }
  }
  std::cout << "READY orchestrator " << (*orch)->endpoint() << " " << (*orch)->http_endpoint()
            << std::endl;
  WaitForStopSignal(exit_on_eof);
  return 0;
}

void AddMaster(CLI::App& app, std::vector<Command>* out) {
  struct Opts {
    MasterConfig config;
    std::int64_t reservation_ttl_ms = 0;
    std::int64_t node_timeout_ms = 0;
    std::int64_t read_lease_timeout_ms = 0;
    std::vector<std::string> cache_budgets;  // CLASS=SHARE.
    EtcdOptions etcd;
    bool exit_on_eof = false;
  };
  auto o = std::make_shared<Opts>();
  o->reservation_ttl_ms = o->config.reservation_ttl.count();
  o->node_timeout_ms = o->config.node_timeout.count();
  o->read_lease_timeout_ms = o->config.read_lease_timeout.count();
  CLI::App* cmd = app.add_subcommand("master", "run the store master (metadata, gRPC)");
  cmd->add_option("--listen", o->config.listen, "gRPC endpoint host:port (port 0 picks one)")
      ->capture_default_str();
  cmd->add_option("--advertise", o->config.advertise, kAdvertiseHelp);
  cmd->add_option("--metrics-port", o->config.metrics_port,
                  "serve Prometheus /metrics on this port of the --listen host (0 picks one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--reservation-ttl-ms", o->reservation_ttl_ms,
                  "how long space reserved for a client's next put stays held unused (0: off)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{600000}))
      ->capture_default_str();
  cmd->add_option("--node-timeout-ms", o->node_timeout_ms,
                  "a store node silent this long is lost (its objects with it); at least "
                  "4 heartbeat intervals (500 ms each)")
      ->check(CLI::Range(std::int64_t{2000}, std::int64_t{600000}))
      ->capture_default_str();
  cmd->add_option("--read-lease-timeout-ms", o->read_lease_timeout_ms,
                  "a read (a get, or an in-place view) not ended this long loses its lease and "
                  "no longer protects the object")
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{3600000}))
      ->capture_default_str();
  cmd->add_option("--cache-budget", o->cache_budgets,
                  "CLASS=SHARE: a cache class's byte budget as a share of the store's memory "
                  "(e.g. condition=0.2); past it the class evicts its own LRU entries, never "
                  "another's or a payload (repeatable or comma-separated)")
      ->delimiter(',');
  cmd->add_option("--soft-pin-reads", o->config.soft_pin_reads,
                  "soft-pin a cache object after this many reads (evicted only after every "
                  "other cache object; 0: never)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_flag("--durable-commits", o->config.durable_commits,
                "acknowledge a put once its store nodes have it, so a master that takes over "
                "knows every acknowledged object (one more round trip per put; on with --etcd)");
  cmd->add_flag("--exit-on-stdin-eof", o->exit_on_eof, kExitOnEofHelp);
  AddEtcdFlags(cmd, &o->etcd);
  SecurityResolver security = AddSecurityFlags(cmd);
  out->push_back({cmd, [o, security] {
                    for (const std::string& b : o->cache_budgets) {
                      const std::size_t eq = b.find('=');
                      double share = 0;
                      const char* end = b.data() + b.size();
                      const auto [p, ec] = eq == std::string::npos
                                               ? std::from_chars(end, end, share)
                                               : std::from_chars(b.data() + eq + 1, end, share);
                      if (eq == std::string::npos || ec != std::errc() || p != end) {
                        std::cerr << "sluice master: --cache-budget '" << b
                                  << "': want CLASS=SHARE, e.g. condition=0.2\n";
                        return 2;
                      }
                      o->config.cache_budgets[b.substr(0, eq)] = share;
                    }
                    std::optional<SecurityConfig> s =
                        security("sluice master", {o->config.listen}, true);
                    if (!s) {
                      return 2;
                    }
                    o->config.security = std::move(*s);
                    o->config.read_lease_timeout =
                        std::chrono::milliseconds(o->read_lease_timeout_ms);
                    o->config.reservation_ttl = std::chrono::milliseconds(o->reservation_ttl_ms);
                    o->config.node_timeout = std::chrono::milliseconds(o->node_timeout_ms);
                    return RunMaster(o->config, o->exit_on_eof, o->etcd);
                  }});
}

void AddStoreNode(CLI::App& app, std::vector<Command>* out) {
  struct Opts {
    StoreNodeConfig config;
    std::string listen = "127.0.0.1:0", memory = "1GiB", disk_size = "0", disk_rate = "0";
    std::string advertise, host_id;
    EtcdOptions etcd;
    bool exit_on_eof = false;
    int metrics_port = -1;
    std::vector<std::string> transports = {"tcp", "shm"};
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("store-node", "contribute memory to the store (runs until stopped)");
  cmd->add_option("--master", o->config.master, "master host:port (or found with --etcd)");
  cmd->add_option("--memory", o->memory, "memory to contribute")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--segments", o->config.segments, "split the memory into N segments")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--listen", o->listen, "transfer-engine endpoint host:port")
      ->capture_default_str();
  cmd->add_option("--advertise", o->advertise, kAdvertiseHelp);
  cmd->add_option("--transports", o->transports,
                  "the transfer engine's transports, comma-separated: tcp, shm, ucx (UCX: its "
                  "clients must run it too; UCX_TLS picks its fabric)")
      ->delimiter(',')
      ->check(CLI::IsMember({"tcp", "shm", "ucx"}))
      ->capture_default_str();
  AddHostIdFlag(cmd, &o->host_id);
  cmd->add_option("--node-id", o->config.node_id, "default: the engine endpoint");
  cmd->add_option("--disk", o->config.disk_dir,
                  "directory for the disk tier (kept across restarts with the same --node-id "
                  "and --disk-size)");
  cmd->add_option("--disk-size", o->disk_size, "disk tier size (needs --disk)")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--disk-rate", o->disk_rate,
                  "cap on disk-tier copies per second, e.g. 200MiB (0: none)")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  cmd->add_option("--metrics-port", o->metrics_port,
                  "serve Prometheus /metrics on this port of --listen's host (0 picks one; "
                  "printed on the READY line)")
      ->check(CLI::Range(0, 65535));
  cmd->add_flag("--exit-on-stdin-eof", o->exit_on_eof, kExitOnEofHelp);
  AddEtcdFlags(cmd, &o->etcd);
  SecurityResolver security = AddSecurityFlags(cmd);
  out->push_back({cmd, [o, security] {
                    std::optional<SecurityConfig> s =
                        security("sluice store-node", {o->listen}, false);
                    if (!s || !ApplyHostId("sluice store-node", o->host_id)) {
                      return 2;
                    }
                    o->config.security = std::move(*s);
                    o->config.memory_bytes = *ParseByteSize(o->memory);
                    o->config.disk_bytes = *ParseByteSize(o->disk_size);
                    o->config.disk_bytes_per_s = *ParseByteSize(o->disk_rate);
                    if (o->config.disk_dir.empty() != (o->config.disk_bytes == 0)) {
                      std::cerr << "sluice store-node: --disk and --disk-size go together\n";
                      return 2;
                    }
                    return RunStoreNode(o->listen, o->advertise, o->config, o->exit_on_eof, o->etcd,
                                        o->metrics_port, o->transports);
                  }});
}

void AddOrchestrator(CLI::App& app, std::vector<Command>* out) {
  struct Opts {
    OrchestratorConfig config;
    std::vector<std::string> declared;
    std::int64_t worker_timeout_ms = 0;
    std::int64_t assignment_timeout_ms = 0;
    std::int64_t retry_backoff_ms = 0;
    std::int64_t result_ttl_s = 0;
    std::int64_t checkpoint_retention_s = 0;
    EtcdOptions etcd;
    bool journal_in_etcd = false;
    std::string advertise;
    bool exit_on_eof = false;
  };
  auto o = std::make_shared<Opts>();
  o->worker_timeout_ms = o->config.worker_timeout.count();
  o->assignment_timeout_ms = o->config.assignment_timeout.count();
  o->retry_backoff_ms = o->config.retry_backoff.count();
  o->result_ttl_s = o->config.result_ttl.count();
  o->checkpoint_retention_s = o->config.checkpoint_retention.count();
  CLI::App* cmd = app.add_subcommand(
      "orchestrator", "run the orchestrator (gRPC for workers, HTTP/JSON for clients)");
  cmd->add_option("--listen", o->config.listen, "gRPC endpoint for workers (port 0 picks one)")
      ->capture_default_str();
  cmd->add_option("--http", o->config.http_listen, "HTTP endpoint for clients")
      ->capture_default_str();
  cmd->add_option("--advertise", o->advertise,
                  "with --etcd: the host workers and clients dial (published with the bound gRPC "
                  "and HTTP ports); needed when listening on a wildcard address");
  cmd->add_option("--max-queued-jobs", o->config.max_queued_jobs,
                  "queued jobs beyond which submissions answer 429")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--worker-timeout-ms", o->worker_timeout_ms,
                  "a worker silent this long is lost and its work re-queued")
      ->check(CLI::Range(std::int64_t{600}, std::int64_t{3600000}))
      ->capture_default_str();
  cmd->add_option("--assignment-timeout-ms", o->assignment_timeout_ms,
                  "an assignment without progress this long goes to another worker")
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{86400000}))
      ->capture_default_str();
  cmd->add_option("--retry-backoff-ms", o->retry_backoff_ms,
                  "a retryable stage failure runs again after this, doubling per attempt (0: at "
                  "once)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{30000}))
      ->capture_default_str();
  cmd->add_option("--admission-overcommit", o->config.admission_overcommit,
                  "jobs per decode slot that may hold a reservation while in denoise (0: only "
                  "into a free decode slot, so denoise runs at most as many jobs as decode has "
                  "slots)")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  cmd->add_option("--store-master", o->config.store_master,
                  "store master host:port (release cancelled payloads, re-run lost ones)");
  cmd->add_option("--journal", o->config.journal_path,
                  "SQLite file journaling accepted jobs (they survive a restart)");
  cmd->add_option("--adapters", o->config.adapters.dir,
                  "directory of the reference model's LoRA adapters (NAME.safetensors, "
                  "registered at start; POST /v1/adapters writes there too); needs "
                  "--store-master");
  cmd->add_flag("--journal-in-etcd", o->journal_in_etcd,
                "with --etcd: journal accepted jobs in etcd (under /sluice/CLUSTER/orchestrator/"
                "journal/), so a standby that takes over runs them on; results up to 1 MiB are "
                "kept there too");
  cmd->add_option("--result-dir", o->config.result_dir,
                  "with a journal: directory of succeeded jobs' results, one file each "
                  "(default: JOURNAL.results; with --journal-in-etcd, none)");
  cmd->add_flag("--colocated", o->config.colocated,
                "each job is one assignment to a denoise-pool worker running every stage");
  cmd->add_option("--declare-model", o->declared,
                  "NAME=PIPELINE, e.g. my-i2i=denoise:admission,decode: a model jobs may queue "
                  "for before its workers register (repeatable)");
  cmd->add_option("--max-finished-jobs", o->config.max_finished_jobs,
                  "finished jobs kept queryable (status, error, result), newest first")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}))
      ->capture_default_str();
  cmd->add_option("--result-ttl-s", o->result_ttl_s,
                  "how long a finished job (and its result) stays queryable; with --journal, "
                  "across restarts")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{30} * 86400))
      ->capture_default_str();
  cmd->add_option("--checkpoint-retention-s", o->checkpoint_retention_s,
                  "how long the checkpoints of a job submitted with keep_checkpoints stay in the "
                  "store (for resume_from)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{30} * 86400))
      ->capture_default_str();
  cmd->add_flag("!--no-output-check", o->config.check_outputs,
                "serve whatever the last stage returns (default: an image must be a PNG of the "
                "requested size, a video a frames archive or MP4; a bad one runs again elsewhere)");
  cmd->add_flag("--shared-condition-cache", o->config.shared_condition_cache,
                "let every tenant's jobs find one another's cached conditions (default: each "
                "tenant's entries are its own, so a cache hit tells no tenant what another "
                "asked)");
  cmd->add_option("--max-bad-outputs", o->config.max_bad_outputs,
                  "a worker returning this many bad outputs gets no further work")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--default-model", o->config.default_model,
                  "the model of requests that name none")
      ->capture_default_str();
  auto http = AddHttpFrontFlags(cmd, &o->config.http);
  AddRequestLimitFlags(cmd, &o->config.limits);
  auto keys = AddApiKeysFlag(cmd, &o->config.access);
  auto https = AddHttpTlsFlags(cmd, &o->config.http);
  auto autoscale = AddAutoscaleFlags(cmd, &o->config.autoscale);
  cmd->add_flag("--exit-on-stdin-eof", o->exit_on_eof, kExitOnEofHelp);
  AddEtcdFlags(cmd, &o->etcd);
  SecurityResolver security = AddSecurityFlags(cmd);
  out->push_back(
      {cmd, [o, http, keys, https, autoscale, security] {
         std::optional<SecurityConfig> s =
             security("sluice orchestrator", {o->config.listen}, true);
         if (!s) {
           return 2;
         }
         o->config.security = std::move(*s);
         http();
         autoscale();
         if (Status s = keys(); !s.ok()) {
           std::cerr << "sluice orchestrator: --" << s.message() << "\n";
           return 2;
         }
         if (Status s = https(); !s.ok()) {
           std::cerr << "sluice orchestrator: --" << s.message() << "\n";
           return 2;
         }
         if (Status h =
                 CheckHttpListenSecurity("sluice orchestrator", o->config.http_listen,
                                         o->config.access.closed(), o->config.security.insecure);
             !h.ok()) {
           std::cerr << h.message() << "\n";
           return 2;
         }
         o->config.worker_timeout = std::chrono::milliseconds(o->worker_timeout_ms);
         o->config.assignment_timeout = std::chrono::milliseconds(o->assignment_timeout_ms);
         o->config.retry_backoff = std::chrono::milliseconds(o->retry_backoff_ms);
         o->config.result_ttl = std::chrono::seconds(o->result_ttl_s);
         o->config.checkpoint_retention = std::chrono::seconds(o->checkpoint_retention_s);
         for (const std::string& d : o->declared) {
           const std::size_t eq = d.find('=');
           if (eq == std::string::npos || eq == 0 ||
               !o->config.models.emplace(d.substr(0, eq), d.substr(eq + 1)).second) {
             std::cerr << "sluice orchestrator: --declare-model '" << d
                       << "': NAME=PIPELINE, each NAME once\n";
             return 2;
           }
         }
         return RunOrchestrator(o->config, o->exit_on_eof, o->etcd, o->journal_in_etcd,
                                o->advertise);
       }});
}

void AddWorker(CLI::App& app, std::vector<Command>* out) {
  struct Opts {
    WorkerOptions worker;
    std::string host_id;
    EtcdOptions etcd;
    bool exit_on_eof = false;
    std::string weights;
  };
  auto o = std::make_shared<Opts>();
  WorkerOptions& w = o->worker;
  CLI::App* cmd = app.add_subcommand(
      "worker", "run a stage worker (reference models, or profile stages with real payload sizes)");
  cmd->add_option("--stage", w.stage, "encode, denoise or decode")
      ->required()
      ->check(CLI::IsMember({"encode", "denoise", "decode"}));
  cmd->add_option("--orchestrator", w.orchestrator,
                  "orchestrator gRPC host:port (or found with --etcd)");
  cmd->add_option("--master", w.master, "store master host:port");
  cmd->add_option("--profile", w.profile,
                  "model profile, e.g. wan2.1-480p (default: the reference models)");
  cmd->add_option("--model", w.models,
                  "the models it serves, comma-separated (default: sluice-reference, or the "
                  "--profile name); jobs of a model run only on its workers")
      ->delimiter(',');
  cmd->add_flag("--colocated", w.colocated,
                "run all three stages of a job (with `orchestrator --colocated`; --stage denoise)");
  cmd->add_option("--weights", o->weights,
                  "reference stages: a safetensors file, or random:SEED (default: the shipped "
                  "trained weights)");
  cmd->add_option("--steps", w.steps, "reference: denoise steps when a request names none")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", w.checkpoint_every,
                  "reference denoise: store the state every k steps (0: never; needs --master)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--step-cache-threshold", w.step_cache_threshold,
                  "reference denoise: skip the denoiser's blocks on a step whose input moved less "
                  "than this since the last full step, for requests that name no step_cache "
                  "(0: off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--denoise-batch", w.denoise_batch,
                  "reference denoise: run the steps of up to this many concurrent jobs as one "
                  "batch (raises --capacity to it; 1: each job alone)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--interactive-alone", w.interactive_alone,
                "reference denoise with --denoise-batch: interactive jobs step alone, outside the "
                "batch (where a batch costs each member more than a step alone, as on a CPU)");
  cmd->add_option("--adapter-cache", w.adapter_cache,
                  "reference denoise: LoRA adapters kept in memory (read from the store on first "
                  "use) up to this size; beyond, the least recently used is dropped")
      ->check(ByteSizeValidator())
      ->capture_default_str();
  CLI::Option* condition_cache =
      cmd->add_flag("--condition-cache,!--no-condition-cache", w.condition_cache,
                    "encode with --master: cache each text's embedding in the store, so a job "
                    "whose prompt and negative prompt are cached skips encode (default: on for "
                    "the reference models; with --profile, only when given: stand-in "
                    "embeddings of the profile's size, for the profile's model only)");
  cmd->add_flag("--cfg-sharing", w.cfg_sharing,
                "reference denoise with --master: share the negative prompt's cross-attention "
                "keys and values between requests through the store's feature cache (same bytes)");
  cmd->add_option("--time-factor", w.time_factor, "scales every profile timing")
      ->capture_default_str();
  cmd->add_option("--capacity", w.capacity, "concurrent assignments")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--mode", w.mode, "transfer mode: store, p2p or auto")->capture_default_str();
  cmd->add_option("--listen", w.listen, "transfer engine endpoint")->capture_default_str();
  cmd->add_option("--advertise", w.advertise, kAdvertiseHelp);
  cmd->add_option("--transports", w.transports,
                  "the transfer engine's transports, comma-separated: tcp, shm, ucx (its peers "
                  "and store nodes must run one it does; UCX_TLS picks UCX's fabric) [default: "
                  "tcp,shm]")
      ->delimiter(',')
      ->check(CLI::IsMember({"tcp", "shm", "ucx"}));
  AddHostIdFlag(cmd, &o->host_id);
  cmd->add_option("--assignment-timeout-ms", w.assignment_timeout_ms,
                  "an assignment with no progress this long goes to another worker (default: "
                  "10x the profile's step, encode or decode time, at least 30 s; without "
                  "--profile, the orchestrator's)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86400000}));
  cmd->add_option("--metrics-port", w.metrics_port,
                  "serve Prometheus /metrics on this port of --listen's host (0 picks one; "
                  "printed on the READY line)")
      ->check(CLI::Range(0, 65535));
  cmd->add_flag("--exit-on-stdin-eof", o->exit_on_eof, kExitOnEofHelp);
  AddEtcdFlags(cmd, &o->etcd);
  SecurityResolver security = AddSecurityFlags(cmd);
  out->push_back(
      {cmd, [o, security, condition_cache] {
         o->worker.condition_cache_given = condition_cache->count() > 0;
         std::optional<SecurityConfig> s = security("sluice worker", {o->worker.listen}, false);
         if (!s || !ApplyHostId("sluice worker", o->host_id)) {
           return 2;
         }
         bool failed = false;
         auto etcd = ConnectEtcd("sluice worker", o->etcd, &failed);
         WorkerOptions& w = o->worker;
         if (failed ||
             !ResolveLeader("sluice worker", etcd.get(), o->etcd, "orchestrator", 0,
                            &w.orchestrator) ||
             !ResolveLeader("sluice worker", etcd.get(), o->etcd, "master", 0, &w.master)) {
           return 2;
         }
         if (w.orchestrator.empty()) {
           std::cerr << "sluice worker: give --orchestrator or --etcd\n";
           return 2;
         }
         if (etcd != nullptr) {
           // A standby that took over: the worker follows it.
           std::shared_ptr<discovery::EtcdClient> shared = std::move(etcd);
           w.resolve_orchestrator = LeaderResolver(shared, o->etcd, "orchestrator", 0);
           w.resolve_master = LeaderResolver(shared, o->etcd, "master", 0);
         }
         o->worker.security = std::move(*s);
         if (w.profile.empty() || !o->weights.empty()) {
           if (Status loaded = LoadReferenceWeights(o->weights); !loaded.ok()) {
             std::cerr << "sluice worker: --weights: " << loaded.message() << "\n";
             return 2;
           }
         }
         return RunWorker(o->worker, o->exit_on_eof);
       }});
}

}  // namespace

void AddRoleCommands(CLI::App& app, std::vector<Command>* out) {
  AddMaster(app, out);
  AddOrchestrator(app, out);
  AddWorker(app, out);
  AddStoreNode(app, out);
}

}  // namespace sluice::cli
