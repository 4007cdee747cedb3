#include "sluice_cli/autoscale_flags.h"

#include <memory>

namespace sluice::cli {

std::function<void()> AddAutoscaleFlags(CLI::App* cmd, AutoscaleOptions* o) {
  struct Seconds {
    double window = 10, up = 5, down = 30, slo = 0;
  };
  auto s = std::make_shared<Seconds>();
  cmd->add_option("--autoscale-target", o->target_utilization,
                  "autoscale: busy slots over slots each pool is sized for")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_option("--autoscale-down-below", o->scale_down_below,
                  "autoscale: a pool shrinks only below this utilization (and with one worker "
                  "fewer still below the target)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  cmd->add_option("--autoscale-window", s->window, "autoscale: seconds of load averaged")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--autoscale-up-cooldown", s->up, "autoscale: seconds between two growths")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--autoscale-down-cooldown", s->down,
                  "autoscale: seconds a pool stays quiet before it loses a worker")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--autoscale-slo-p99", s->slo,
                  "autoscale: seconds the jobs' p99 latency must stay within; while missed, each "
                  "model's busiest pool grows by one worker per up cooldown (0: no SLO)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--autoscale-min", o->min_workers, "autoscale: fewest workers per pool")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--autoscale-max", o->max_workers, "autoscale: most workers per pool")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  return [o, s] {
    auto ms = [](double seconds) {
      return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
    };
    o->window = ms(s->window);
    o->up_cooldown = ms(s->up);
    o->down_cooldown = ms(s->down);
    o->slo_p99 = ms(s->slo);
  };
}

}  // namespace sluice::cli
