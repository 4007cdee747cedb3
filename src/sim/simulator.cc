#include "sim/simulator.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>
#include <unordered_map>

#include "orchestrator/core/scheduler.h"

namespace sluice::sim {
namespace {

namespace orch = ::sluice::orchestrator;
using orch::Action;

constexpr double kTickS = 1.0;  // Scheduler ticks (aging, dispatch) on the virtual clock.

struct Event {
  enum class Kind : std::uint8_t { kArrival, kTraced, kJoin, kStageEnd, kFail, kRepair, kTick };
  double t = 0;
  std::uint64_t seq = 0;  // Ties run in the order scheduled.
  Kind kind = Kind::kTick;
  // Arrival: stream; traced: its index; join, stage end: job; fail/repair: worker.
  std::uint64_t a = 0;
  std::uint64_t b = 0;  // Join, stage end: the assignment's token.
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct PoolState {
  std::vector<std::size_t> models;  // Served by its workers.
  std::string stage;
  int gpus = 0, capacity = 1;
  const std::vector<double>* gain = nullptr;  // Its stage's batch_gain, when it batches.
  double busy_slot_s = 0;
  double busy_work = 0;  // Batching: the integral of BatchGain(running batch) over the window.
  std::size_t max_queued = 0;
  int running = 0;             // Assignments holding a slot now.
  double interval_busy = 0;    // Sum of `running` over this interval's ticks.
  std::vector<double> series;  // utilization_series.
};

struct WorkerState {
  std::size_t pool = 0;
  bool alive = true;
  // A batching pool's worker: the jobs stepping in its batch, and when
  // their work left was last brought up to date.
  std::vector<std::uint64_t> batch;
  double since = 0;
};

struct JobState {
  std::uint64_t id = 0;
  std::size_t stream = 0;  // Its (model, class).
  std::size_t model = 0;
  std::size_t stage = 0;  // Of its current assignment, in its model.
  bool counted = true;
  double submitted = 0;
  std::uint64_t token = 0;    // Of the current assignment; 0: none.
  orch::WorkerId worker = 0;  // Its pool is the stage it runs.
  double start = 0;           // Of the current assignment.
  double service_at = 0;      // When its transfer ends and service begins.
  double end = 0;             // Planned end.
  double step_s = 0;          // Service time per step (admission stages).
  // A batching stage's job: its service alone (from its resume step), what
  // is left of it as of its worker's `since`, and whether it is in the batch.
  double work_total = 0, work_left = 0;
  bool in_batch = false;
  int resume_step = 0;
  double first_output = -1;     // Time to first frame, once its last stage runs.
  double held_bytes = 0;        // Its payload in the store (the last stage's output).
  double store_wait_from = -1;  // Its stage's end waiting for room since; -1: not.
};

struct StreamStats {
  std::string model;
  std::size_t model_index = 0;
  orch::PriorityClass priority = orch::PriorityClass::kStandard;
  std::uint64_t submitted = 0, completed = 0, failed = 0, refused = 0;
  std::vector<double> latency, ttff;
  double last_done = 0;
};

Percentiles Summarize(std::vector<double>& v) {
  Percentiles p;
  if (v.empty()) {
    return p;
  }
  std::sort(v.begin(), v.end());
  p.p50 = QuantileOf(v, 0.5);
  p.p90 = QuantileOf(v, 0.9);
  p.p99 = QuantileOf(v, 0.99);
  double sum = 0;
  for (double x : v) {
    sum += x;
  }
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

Status Validate(const SimConfig& c) {
  if (c.models.empty() || (c.arrivals.empty() && c.trace.empty())) {
    return InvalidArgumentError("sim: at least one model, and arrivals or a trace");
  }
  if (!(c.duration_s > 0) || !(c.drain_limit_s >= 0) || !(c.link_gbps > 0) ||
      c.link_latency_us < 0 || c.mtbf_s < 0 || !(c.repair_s > 0) || c.series_interval_s < 0 ||
      !(c.store_bytes >= 0)) {
    return InvalidArgumentError(
        "sim: duration_s, link_gbps and repair_s must be > 0; drain_limit_s, link_latency_us, "
        "mtbf_s, series_interval_s and store_bytes >= 0");
  }
  for (const ModelProfile& m : c.models) {
    for (const StageProfile& s : m.stages) {
      if (!(s.service.mean_s > 0) || s.service.cv < 0 || s.steps < 1 || s.input_chunks < 1 ||
          !(s.first_output_fraction > 0 && s.first_output_fraction <= 1)) {
        return InvalidArgumentError("sim: model " + m.name + " stage " + s.name +
                                    ": mean_s > 0, cv >= 0, steps >= 1, input_chunks >= 1, "
                                    "first_output_fraction in (0, 1]");
      }
      if (!s.batch_gain.empty()) {
        bool good = s.batch_gain.size() <= 1024 && std::abs(s.batch_gain[0] - 1) < 1e-9;
        for (double g : s.batch_gain) {
          good = good && g > 0 && std::isfinite(g);
        }
        if (!good || s.kind != orch::StageKind::kAdmission || s.input_chunks != 1) {
          return InvalidArgumentError(
              "sim: model " + m.name + " stage " + s.name +
              ": batch_gain is for an admission stage without chunked input, starts at 1, "
              "holds gains > 0 and at most 1024 of them");
        }
      }
      if (c.store_bytes > 0 && &s != &m.stages.back() &&
          static_cast<double>(s.output_bytes) > c.store_bytes) {
        return InvalidArgumentError("sim: model " + m.name + " stage " + s.name + ": its " +
                                    std::to_string(s.output_bytes) +
                                    " byte output is larger than the store (store_bytes)");
      }
    }
  }
  for (const Arrivals& a : c.arrivals) {
    if (!(a.rate_per_s > 0)) {
      return InvalidArgumentError("sim: arrivals of " + a.model + ": rate_per_s must be > 0");
    }
    if (!(a.burst_factor >= 1) ||
        (a.burst_factor > 1 && !(a.burst_s > 0 && a.burst_s < a.burst_every_s))) {
      return InvalidArgumentError("sim: arrivals of " + a.model +
                                  ": burst_factor must be >= 1, and with bursts 0 < burst_s < "
                                  "burst_every_s");
    }
  }
  for (std::size_t i = 0; i < c.trace.size(); ++i) {
    const double t = c.trace[i].t_s;
    if (!(t >= 0 && t <= c.duration_s) || (i > 0 && t < c.trace[i - 1].t_s)) {
      return InvalidArgumentError("sim: trace job " + std::to_string(i) + " at " +
                                  std::to_string(t) +
                                  " s: times must be in order, from 0 to duration_s");
    }
  }
  return Status::Ok();
}

class Simulation {
 public:
  explicit Simulation(const SimConfig& c) : c_(c), rng_(c.seed) {
    orch::SchedulerOptions o;
    o.assignment_timeout = std::chrono::milliseconds(0);  // Workers here never hang.
    o.max_queued_jobs = std::size_t{1} << 26;
    o.admission_overcommit = c.admission_overcommit;
    scheduler_ = std::make_unique<orch::Scheduler>(o);
  }

  Status Setup() {
    for (std::size_t m = 0; m < c_.models.size(); ++m) {
      const ModelProfile& mp = c_.models[m];
      orch::ModelSpec spec{mp.name, {}};
      for (const StageProfile& s : mp.stages) {
        spec.stages.push_back({s.name, s.kind});
      }
      SLUICE_RETURN_IF_ERROR(scheduler_->DeclareModel(spec));
      model_index_[mp.name] = m;
    }
    std::vector<std::vector<bool>> covered(c_.models.size());
    for (std::size_t m = 0; m < c_.models.size(); ++m) {
      covered[m].assign(c_.models[m].stages.size(), false);
    }
    for (const PoolSize& p : c_.pools) {
      PoolState& ps = pools_.emplace_back();
      std::vector<std::string> names = {p.model};
      names.insert(names.end(), p.more_models.begin(), p.more_models.end());
      for (const std::string& name : names) {
        auto m = model_index_.find(name);
        const std::size_t stage = m == model_index_.end() ? kNone : Stage(m->second, p.stage);
        if (stage == kNone || p.gpus < 1 || p.capacity < 1) {
          return InvalidArgumentError("sim: pool " + name + "/" + p.stage +
                                      ": an unknown model or stage, or gpus/capacity below 1");
        }
        covered[m->second][stage] = true;
        ps.models.push_back(m->second);
      }
      ps.stage = p.stage;
      ps.gpus = p.gpus;
      ps.capacity = p.capacity;
      const StageProfile& first =
          c_.models[ps.models.front()].stages[Stage(ps.models.front(), p.stage)];
      if (!first.batch_gain.empty()) {
        if (ps.models.size() > 1) {
          return InvalidArgumentError("sim: pool " + p.model + "/" + p.stage +
                                      ": a batching stage's pool serves one model");
        }
        ps.gain = &first.batch_gain;
      }
      for (int g = 0; g < p.gpus; ++g) {
        workers_.push_back({pools_.size() - 1, true, {}, 0});
        const orch::WorkerId id = workers_.size();
        SLUICE_RETURN_IF_ERROR(Call(scheduler_->WorkerUp(id, Spec(pools_.back()), Now())));
        if (c_.mtbf_s > 0) {
          Push(Exp(1 / c_.mtbf_s), Event::Kind::kFail, id, 0);
        }
      }
    }
    for (std::size_t m = 0; m < covered.size(); ++m) {
      for (std::size_t s = 0; s < covered[m].size(); ++s) {
        if (!covered[m][s]) {
          return InvalidArgumentError("sim: model " + c_.models[m].name + " stage " +
                                      c_.models[m].stages[s].name + " has no pool");
        }
      }
    }
    for (std::size_t a = 0; a < c_.arrivals.size(); ++a) {
      SLUICE_ASSIGN_OR_RETURN(arrival_stream_.emplace_back(),
                              StreamOf(c_.arrivals[a].model, c_.arrivals[a].priority));
      NextArrival(a);
    }
    for (const TracedJob& t : c_.trace) {
      SLUICE_ASSIGN_OR_RETURN(trace_stream_.emplace_back(), StreamOf(t.model, t.priority));
    }
    if (!c_.trace.empty()) {
      Push(c_.trace[0].t_s, Event::Kind::kTraced, 0, 0);
    }
    Push(kTickS, Event::Kind::kTick, 0, 0);
    return Status::Ok();
  }

  void Run() {
    const double end = c_.duration_s + c_.drain_limit_s;
    while (!events_.empty()) {
      const Event e = events_.top();
      if (e.t > end) {
        break;
      }
      if (e.t > c_.duration_s && jobs_.empty()) {
        break;  // Arrivals over and every job finished.
      }
      events_.pop();
      now_ = e.t;
      switch (e.kind) {
        case Event::Kind::kArrival:
          if (now_ < c_.duration_s) {
            NextArrival(e.a);
          }
          if (e.b == 0) {  // Else the rate changed here: only the next one is drawn.
            Arrive(arrival_stream_[e.a], true);
          }
          break;
        case Event::Kind::kTraced:
          if (e.a + 1 < c_.trace.size()) {
            events_.push({c_.trace[e.a + 1].t_s, ++seq_, Event::Kind::kTraced, e.a + 1, 0});
          }
          Arrive(trace_stream_[e.a], c_.trace[e.a].counted);
          break;
        case Event::Kind::kJoin:
          Join(e.a, e.b);
          break;
        case Event::Kind::kStageEnd:
          StageEnd(e.a, e.b, e.t);
          break;
        case Event::Kind::kFail:
          Fail(e.a);
          break;
        case Event::Kind::kRepair:
          Repair(e.a);
          break;
        case Event::Kind::kTick:
          Tick();
          break;
      }
    }
  }

  SimResult Result() {
    SimResult r;
    for (StreamStats& s : streams_) {
      ClassResult cr;
      cr.model = s.model;
      cr.priority = s.priority;
      cr.last_done_s = s.last_done;
      cr.submitted = s.submitted;
      cr.completed = s.completed;
      cr.failed = s.failed;
      cr.refused = s.refused;
      cr.unfinished = s.submitted - s.completed - s.failed;
      cr.throughput_per_s = static_cast<double>(s.completed) / c_.duration_s;
      cr.latency_s = Summarize(s.latency);
      cr.ttff_s = Summarize(s.ttff);
      if (c_.keep_samples) {
        cr.latency_samples = std::move(s.latency);  // Sorted by Summarize.
        cr.ttff_samples = std::move(s.ttff);
      }
      r.classes.push_back(std::move(cr));
    }
    for (const PoolState& p : pools_) {
      PoolResult pr;
      for (std::size_t m : p.models) {
        pr.model += (pr.model.empty() ? "" : "+") + c_.models[m].name;
      }
      pr.stage = p.stage;
      pr.gpus = p.gpus;
      pr.capacity = p.capacity;
      pr.utilization =
          p.gain == nullptr
              ? p.busy_slot_s / (c_.duration_s * p.gpus * p.capacity)
              : p.busy_work / (c_.duration_s * p.gpus * BatchGain(*p.gain, p.capacity));
      pr.max_queued = p.max_queued;
      pr.utilization_series = p.series;
      r.pools.push_back(std::move(pr));
    }
    r.events = calls_;
    r.dispatches = dispatches_;
    r.worker_failures = failures_;
    r.store_peak_bytes = store_peak_;
    r.store_waits = store_waits_;
    r.store_wait_s = store_wait_s_;
    r.store_wait_max_s = store_wait_max_s_;
    r.simulated_s = now_;
    return r;
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  orch::TimePoint Now() const {
    return orch::TimePoint{} +
           std::chrono::duration_cast<orch::Clock::duration>(std::chrono::duration<double>(now_));
  }
  std::size_t Stage(std::size_t model, std::string_view name) const {
    const auto& stages = c_.models[model].stages;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      if (stages[s].name == name) {
        return s;
      }
    }
    return kNone;
  }
  orch::WorkerSpec Spec(const PoolState& p) const {
    orch::WorkerSpec w;
    for (std::size_t m : p.models) {
      w.models.push_back(c_.models[m].name);
    }
    w.stage = p.stage;
    w.capacity = p.capacity;
    return w;
  }
  double Exp(double rate) { return std::exponential_distribution<double>(rate)(rng_); }
  double Sample(const ServiceTime& t) {
    if (t.cv <= 0) {
      return t.mean_s;
    }
    const double sigma2 = std::log1p(t.cv * t.cv);
    return std::lognormal_distribution<double>(std::log(t.mean_s) - sigma2 / 2,
                                               std::sqrt(sigma2))(rng_);
  }
  void Push(double delay, Event::Kind kind, std::uint64_t a, std::uint64_t b) {
    events_.push({now_ + delay, ++seq_, kind, a, b});
  }
  // Draws arrivals `a`'s next job at its rate now; past the next change of
  // rate (a burst's start or end), a redraw there instead (b = 1), which a
  // Poisson process allows.
  void NextArrival(std::size_t a) {
    const Arrivals& arr = c_.arrivals[a];
    if (arr.burst_factor <= 1) {
      Push(Exp(arr.rate_per_s), Event::Kind::kArrival, a, 0);
      return;
    }
    const double in_period = std::fmod(now_, arr.burst_every_s);
    const bool bursting = in_period < arr.burst_s;
    const double change = now_ - in_period + (bursting ? arr.burst_s : arr.burst_every_s);
    const double gap = Exp(arr.rate_per_s * (bursting ? arr.burst_factor : 1));
    if (now_ + gap < change) {
      Push(gap, Event::Kind::kArrival, a, 0);
    } else {
      Push(change - now_, Event::Kind::kArrival, a, 1);
    }
  }
  Status Call(Status s) {
    ++calls_;
    HandleActions();
    return s;
  }

  // The stream of (model, priority), added on first sight.
  ::sluice::Result<std::size_t> StreamOf(const std::string& model, orch::PriorityClass priority) {
    if (model_index_.count(model) == 0) {
      return InvalidArgumentError("sim: arrivals of an unknown model " + model);
    }
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].model == model && streams_[i].priority == priority) {
        return i;
      }
    }
    StreamStats& st = streams_.emplace_back();
    st.model = model;
    st.model_index = model_index_.find(model)->second;
    st.priority = priority;
    return streams_.size() - 1;
  }

  void Arrive(std::size_t stream, bool counted) {
    StreamStats& st = streams_[stream];
    orch::JobSpec spec;
    spec.id = ++next_job_;
    spec.model = st.model;
    spec.priority = st.priority;
    JobState& job = jobs_[spec.id];
    job.id = spec.id;
    job.stream = stream;
    job.model = st.model_index;
    job.counted = counted;
    job.submitted = now_;
    if (!Call(scheduler_->Submit(spec, Now())).ok()) {
      st.refused += counted ? 1 : 0;
      jobs_.erase(spec.id);
      return;
    }
    st.submitted += counted ? 1 : 0;
  }

  void HandleActions() {
    for (const Action& a : scheduler_->TakeActions()) {
      auto j = jobs_.find(a.job);
      if (j == jobs_.end()) {
        continue;
      }
      switch (a.kind) {
        case Action::Kind::kDispatch:
          Dispatch(a, j->second);
          break;
        case Action::Kind::kCheckpoint: {
          // The worker checkpoints at its current step and yields.
          JobState& job = j->second;
          const int step = StepReached(job);
          const orch::WorkerId w = job.worker;
          EndAssignment(job);
          ++calls_;
          (void)scheduler_->Progress(a.job, w, step, true, Now());
          ++calls_;
          (void)scheduler_->Preempted(a.job, w, Now());
          break;
        }
        case Action::Kind::kStop:
          EndAssignment(j->second);
          break;
        case Action::Kind::kJobDone: {
          StreamStats& s = streams_[j->second.stream];
          if (!j->second.counted) {
            jobs_.erase(j);
            break;
          }
          ++s.completed;
          s.last_done = now_;
          s.latency.push_back(now_ - j->second.submitted);
          s.ttff.push_back((j->second.first_output >= 0 ? j->second.first_output : now_) -
                           j->second.submitted);
          jobs_.erase(j);
          break;
        }
        case Action::Kind::kJobFailed:
          streams_[j->second.stream].failed += j->second.counted ? 1 : 0;
          store_used_ -= j->second.held_bytes;  // Its payload is removed.
          jobs_.erase(j);
          break;
        case Action::Kind::kReleaseJob:
          break;
      }
    }
  }

  void Dispatch(const Action& a, JobState& job) {
    // A worker here serves one stage (its pool's) of the job's model.
    const PoolState& pool = pools_[workers_[a.worker - 1].pool];
    const ModelProfile& m = c_.models[job.model];
    const std::size_t stage = Stage(job.model, pool.stage);
    job.stage = stage;
    const StageProfile& sp = m.stages[stage];
    ++dispatches_;
    const double bytes = stage == 0 ? 0 : static_cast<double>(m.stages[stage - 1].output_bytes);
    const double full = Sample(sp.service);
    const int resume = std::clamp(a.resume_step, 0, sp.steps - 1);
    const double service = full * static_cast<double>(sp.steps - resume) / sp.steps;
    // Chunked input: slice j arrives at latency + j x (its transfer); the
    // stage works on each slice once it has arrived and the one before is
    // done, so it ends at first slice + its service + (k - 1) x the longer
    // of a slice's transfer and service.
    const double k = std::max(1, sp.input_chunks);
    const double slice = bytes * 8 / (c_.link_gbps * 1e9) / k;
    const double transfer = c_.link_latency_us * 1e-6 + slice;  // Until it can start.
    const double busy = service / k + (k - 1) * std::max(slice, service / k);
    ++pools_[workers_[a.worker - 1].pool].running;
    job.token = ++next_token_;
    job.worker = a.worker;
    job.start = now_;
    job.service_at = now_ + transfer;
    job.end = now_ + transfer + busy;
    job.step_s = full / sp.steps;
    job.resume_step = resume;
    job.store_wait_from = -1;
    if (pool.gain != nullptr) {
      // It joins its worker's batch once its input is in; its end (and a
      // last stage's first output) then follows the batch's size.
      job.work_total = job.work_left = service;
      job.end = -1;
      if (stage + 1 == m.stages.size()) {
        job.first_output = -1;
      }
      events_.push({job.service_at, ++seq_, Event::Kind::kJoin, a.job, job.token});
      return;
    }
    if (stage + 1 == m.stages.size()) {
      job.first_output = job.service_at + service * sp.first_output_fraction;
    }
    events_.push({job.end, ++seq_, Event::Kind::kStageEnd, a.job, job.token});
  }

  // The step a running admission stage has reached (its latest checkpoint).
  int StepReached(const JobState& job) const {
    const int steps = c_.models[job.model].stages[job.stage].steps;
    const double worked = pools_[workers_[job.worker - 1].pool].gain != nullptr
                              ? job.work_total - WorkLeftNow(job)
                              : now_ - job.service_at;
    const int done = job.step_s > 0 ? static_cast<int>(worked / job.step_s) : 0;
    return std::clamp(job.resume_step + std::max(0, done), 0, steps - 1);
  }

  // A batching stage's job: its service left as of now.
  double WorkLeftNow(const JobState& job) const {
    if (!job.in_batch) {
      return job.work_left;
    }
    const WorkerState& w = workers_[job.worker - 1];
    const int n = static_cast<int>(w.batch.size());
    const double rate = BatchGain(*pools_[w.pool].gain, n) / n;
    return std::max(0.0, job.work_left - (now_ - w.since) * rate);
  }

  // Brings `w`'s batch up to now: each member moved at BatchGain(n) / n
  // of its speed alone since `since`; the pool's busy work is counted, and
  // a last stage's first output passed meanwhile is dated.
  void Advance(WorkerState& w) {
    const double dt = now_ - w.since;
    if (!w.batch.empty() && dt > 0) {
      PoolState& p = pools_[w.pool];
      const int n = static_cast<int>(w.batch.size());
      const double gain = BatchGain(*p.gain, n);
      const double rate = gain / n;
      p.busy_work += gain * (std::min(now_, c_.duration_s) - std::min(w.since, c_.duration_s));
      for (std::uint64_t id : w.batch) {
        JobState& job = jobs_.at(id);
        const double before = job.work_total - job.work_left;
        job.work_left = std::max(0.0, job.work_left - dt * rate);
        const ModelProfile& m = c_.models[job.model];
        const double first = m.stages[job.stage].first_output_fraction * job.work_total;
        if (job.stage + 1 == m.stages.size() && job.first_output < 0 &&
            job.work_total - job.work_left >= first) {
          job.first_output = w.since + (first - before) / rate;
        }
      }
    }
    w.since = now_;
  }

  // Dates each member of `w`'s batch's end at its size now (an end pushed
  // before is stale: StageEnd skips an event not at the job's `end`).
  void Reschedule(WorkerState& w) {
    if (w.batch.empty()) {
      return;
    }
    const int n = static_cast<int>(w.batch.size());
    const double rate = BatchGain(*pools_[w.pool].gain, n) / n;
    for (std::uint64_t id : w.batch) {
      JobState& job = jobs_.at(id);
      job.end = now_ + job.work_left / rate;
      events_.push({job.end, ++seq_, Event::Kind::kStageEnd, id, job.token});
    }
  }

  void Join(orch::JobId id, std::uint64_t token) {
    auto j = jobs_.find(id);
    if (j == jobs_.end() || j->second.token != token) {
      return;  // Taken back during its transfer.
    }
    WorkerState& w = workers_[j->second.worker - 1];
    Advance(w);
    j->second.in_batch = true;
    w.batch.push_back(id);
    Reschedule(w);
  }

  // `job` leaves its worker's batch (done, stopped or lost); the rest go
  // on at the batch's new size.
  void Leave(JobState& job) {
    if (!job.in_batch) {
      return;
    }
    WorkerState& w = workers_[job.worker - 1];
    Advance(w);
    w.batch.erase(std::find(w.batch.begin(), w.batch.end(), job.id));
    job.in_batch = false;
    Reschedule(w);
  }

  // The assignment stops now: its slot's busy time is counted (a batching
  // pool counts its batches' work instead).
  void EndAssignment(JobState& job) {
    if (job.token == 0) {
      return;
    }
    PoolState& p = pools_[workers_[job.worker - 1].pool];
    if (p.gain != nullptr) {
      Leave(job);
    } else {
      p.busy_slot_s += std::max(0.0, std::min(now_, c_.duration_s) - job.start);
    }
    --p.running;
    job.token = 0;
  }

  void StageEnd(orch::JobId id, std::uint64_t token, double at) {
    auto j = jobs_.find(id);
    if (j == jobs_.end() || j->second.token != token) {
      return;  // Taken back meanwhile (failure, preemption).
    }
    if (pools_[workers_[j->second.worker - 1].pool].gain != nullptr) {
      if (!j->second.in_batch || at != j->second.end) {
        return;  // Its batch changed size since this end was dated, or it ended.
      }
      Leave(j->second);
      j->second.work_left = 0;
      if (j->second.first_output < 0 &&
          j->second.stage + 1 == c_.models[j->second.model].stages.size()) {
        j->second.first_output = now_;
      }
    }
    if (!Publish(j->second)) {
      j->second.store_wait_from = now_;  // Holds its GPU until the store has room.
      store_blocked_.emplace_back(id, token);
      return;
    }
    Finish(id, j->second);
    RetryBlocked();
  }

  // The bytes job's current stage hands on (none from its last stage).
  double OutputBytes(const JobState& job) const {
    const ModelProfile& m = c_.models[job.model];
    return job.stage + 1 < m.stages.size() ? static_cast<double>(m.stages[job.stage].output_bytes)
                                           : 0;
  }

  // Whether the store takes the job's output now: its input goes as the
  // stage is done (the orchestrator removes it), its output comes.
  bool Publish(JobState& job) {
    const double out = OutputBytes(job);
    if (c_.store_bytes > 0 && out > 0 && store_used_ - job.held_bytes + out > c_.store_bytes) {
      return false;
    }
    store_used_ += out - job.held_bytes;
    store_peak_ = std::max(store_peak_, store_used_);
    job.held_bytes = out;
    if (job.store_wait_from >= 0) {
      const double waited = now_ - job.store_wait_from;
      ++store_waits_;
      store_wait_s_ += waited;
      store_wait_max_s_ = std::max(store_wait_max_s_, waited);
      job.store_wait_from = -1;
    }
    return true;
  }

  void Finish(orch::JobId id, JobState& job) {
    const orch::WorkerId w = job.worker;
    EndAssignment(job);
    (void)Call(scheduler_->StageDone(id, w, Now()));
  }

  // Stage ends waiting for the store, oldest first: each that fits now
  // finishes (taken back meanwhile: dropped). An earlier one is tried
  // again only once room was freed (a job that finished or failed).
  void RetryBlocked() {
    for (std::size_t i = 0; i < store_blocked_.size();) {
      const auto [id, token] = store_blocked_[i];
      auto j = jobs_.find(id);
      if (j == jobs_.end() || j->second.token != token) {
        store_blocked_.erase(store_blocked_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const double before = store_used_;
      if (!Publish(j->second)) {
        ++i;
        continue;
      }
      store_blocked_.erase(store_blocked_.begin() + static_cast<std::ptrdiff_t>(i));
      Finish(id, j->second);
      if (store_used_ < before) {
        i = 0;  // Room freed: it may let an earlier one through.
      }
    }
  }

  void Fail(orch::WorkerId w) {
    WorkerState& ws = workers_[w - 1];
    if (!ws.alive) {
      return;
    }
    ++failures_;
    ws.alive = false;
    // What it ran goes back; denoise resumes from its latest checkpoint.
    for (orch::JobId id : scheduler_->AssignedTo(w)) {
      auto j = jobs_.find(id);
      if (j == jobs_.end() || j->second.token == 0) {
        continue;
      }
      if (c_.models[j->second.model].stages[j->second.stage].kind == orch::StageKind::kAdmission) {
        ++calls_;
        (void)scheduler_->Progress(id, w, StepReached(j->second), true, Now());
      }
      EndAssignment(j->second);
    }
    (void)Call(scheduler_->WorkerLost(w, Now()));
    Push(c_.repair_s, Event::Kind::kRepair, w, 0);
  }

  void Repair(orch::WorkerId w) {
    WorkerState& ws = workers_[w - 1];
    ws.alive = true;
    (void)Call(scheduler_->WorkerUp(w, Spec(pools_[ws.pool]), Now()));
    if (c_.mtbf_s > 0 && now_ < c_.duration_s) {
      Push(Exp(1 / c_.mtbf_s), Event::Kind::kFail, w, 0);
    }
  }

  void Tick() {
    ++calls_;
    scheduler_->Tick(Now());
    HandleActions();
    // The pools' figures alone: Stats() walks every job, each tick.
    const std::vector<orch::PoolStats> pools = scheduler_->PoolsNow();
    for (PoolState& p : pools_) {
      std::size_t queued = 0;
      for (const orch::PoolStats& ps : pools) {
        if (ps.stage != p.stage) {
          continue;
        }
        for (std::size_t m : p.models) {
          queued += ps.model == c_.models[m].name ? ps.queued : 0;
        }
      }
      p.max_queued = std::max(p.max_queued, queued);
    }
    if (c_.series_interval_s > 0) {
      ++interval_ticks_;
      for (PoolState& p : pools_) {
        p.interval_busy += p.running;
      }
      if (now_ >= static_cast<double>(pools_.front().series.size() + 1) * c_.series_interval_s) {
        for (PoolState& p : pools_) {
          p.series.push_back(p.interval_busy / (interval_ticks_ * p.gpus * p.capacity));
          p.interval_busy = 0;
        }
        interval_ticks_ = 0;
      }
    }
    if (!store_blocked_.empty()) {
      RetryBlocked();  // Room freed by a failed job, which no stage end retries.
    }
    Push(kTickS, Event::Kind::kTick, 0, 0);
  }

  const SimConfig& c_;
  std::mt19937_64 rng_;
  std::unique_ptr<orch::Scheduler> scheduler_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::map<std::string, std::size_t, std::less<>> model_index_;
  std::vector<PoolState> pools_;
  std::vector<WorkerState> workers_;  // WorkerId - 1.
  std::vector<StreamStats> streams_;
  std::vector<std::size_t> arrival_stream_, trace_stream_;  // Stream of each arrivals/trace entry.
  std::unordered_map<orch::JobId, JobState> jobs_;
  double now_ = 0;
  double interval_ticks_ = 0;
  std::uint64_t seq_ = 0, next_job_ = 0, next_token_ = 0;
  std::uint64_t calls_ = 0, dispatches_ = 0, failures_ = 0;
  // The store (store_bytes): payloads held now, the most held, and the
  // stage ends waiting for room (job, token), oldest first.
  double store_used_ = 0, store_peak_ = 0;
  std::deque<std::pair<orch::JobId, std::uint64_t>> store_blocked_;
  std::uint64_t store_waits_ = 0;
  double store_wait_s_ = 0, store_wait_max_s_ = 0;
};

}  // namespace

double BatchGain(const std::vector<double>& gain, int n) {
  if (n <= 0) {
    return 0;
  }
  if (gain.empty()) {
    return n;
  }
  return gain[std::min(static_cast<std::size_t>(n), gain.size()) - 1];
}

double QuantileOf(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) {
    return 0;
  }
  return sorted[std::min(sorted.size() - 1,
                         static_cast<std::size_t>(q * static_cast<double>(sorted.size())))];
}

double ShareWithin(const std::vector<double>& sorted, double limit) {
  if (sorted.empty()) {
    return 1;
  }
  const auto n = std::upper_bound(sorted.begin(), sorted.end(), limit) - sorted.begin();
  return static_cast<double>(n) / static_cast<double>(sorted.size());
}

Result<SimResult> Simulate(const SimConfig& config) {
  SLUICE_RETURN_IF_ERROR(Validate(config));
  const auto t0 = std::chrono::steady_clock::now();
  Simulation s(config);
  SLUICE_RETURN_IF_ERROR(s.Setup());
  s.Run();
  SimResult r = s.Result();
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) == 0) {
    r.peak_rss_bytes = static_cast<std::uint64_t>(u.ru_maxrss) * 1024;
  }
  return r;
}

std::string ToJson(const SimResult& r) {
  nlohmann::json j;
  auto pct = [](const Percentiles& p) {
    return nlohmann::json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}};
  };
  for (const ClassResult& c : r.classes) {
    j["classes"].push_back({{"model", c.model},
                            {"priority", orch::PriorityName(c.priority)},
                            {"submitted", c.submitted},
                            {"completed", c.completed},
                            {"failed", c.failed},
                            {"refused", c.refused},
                            {"unfinished", c.unfinished},
                            {"throughput_per_s", c.throughput_per_s},
                            {"latency_s", pct(c.latency_s)},
                            {"ttff_s", pct(c.ttff_s)}});
  }
  for (const PoolResult& p : r.pools) {
    j["pools"].push_back({{"model", p.model},
                          {"stage", p.stage},
                          {"gpus", p.gpus},
                          {"utilization", p.utilization},
                          {"max_queued", p.max_queued}});
  }
  j["events"] = r.events;
  j["dispatches"] = r.dispatches;
  j["worker_failures"] = r.worker_failures;
  j["store_peak_bytes"] = r.store_peak_bytes;
  j["store_waits"] = r.store_waits;
  j["store_wait_s"] = r.store_wait_s;
  j["store_wait_max_s"] = r.store_wait_max_s;
  j["simulated_s"] = r.simulated_s;
  j["wall_s"] = r.wall_s;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  return j.dump();
}

}  // namespace sluice::sim
