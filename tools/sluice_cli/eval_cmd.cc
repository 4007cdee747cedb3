// `sluice eval`: the reference model's prompt adherence. Draws captioned
// scenes of a split (runtime/reference/scenes.h), generates each through a
// sluice server's HTTP API (--server, or an embedded deployment it starts),
// scores every output with the analyser that inverts the scene generator,
// and prints the mean of each attribute (--json: one object). A PNG grid of
// the first outputs (--grid) shows them beside their prompts. With --edit
// STRENGTH it scores image edits instead: each scene, rendered, is edited
// to the caption with its first object in another colour, and the output
// is scored against that caption (the colour changed) and against the
// picture it started from (kept_psnr_db: what it kept of the rest).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sluice/client/http_client.h"
#include "sluice/runtime/reference_stages.h"
#include "sluice/serve/embedded.h"

#include "media/frames_archive.h"
#include "media/png.h"
#include "runtime/reference/models.h"
#include "runtime/reference/scenes.h"
#include "sluice_cli/commands.h"
#include "sluice_cli/http_flags.h"

namespace sluice::cli {

using client::BaseUrl;
using client::GenerateRequest;
using client::JobOutcome;
using client::Submit;
using client::WaitAndFetch;
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace ref = sluice::reference;

constexpr int kSize = 128;      // The size the reference model was trained at.
constexpr int kFrames = 17;     // Its videos' length.
constexpr int kGridTiles = 16;  // Outputs in --grid, 4 per row.

struct EvalOptions {
  int prompts = 32;
  int videos = 0;
  std::string split = "heldout";
  std::optional<double> guidance;
  std::optional<int> steps;
  std::uint64_t seed = 7;
  std::string server;  // Empty: an embedded deployment.
  std::string api_key;
  std::string mode = "disagg";
  int workers = 4;
  std::string weights;
  std::string grid;
  int concurrency = 8;
  int timeout_s = 600;
  bool json = false;
  // Adapters every request names ("NAME" or "NAME:SCALE"), the embedded
  // deployment's adapters directory, and whether outputs are mirrored
  // left to right before they are scored (the mirror adapter's scenes).
  std::vector<std::pair<std::string, double>> lora;
  std::string adapters;
  bool mirrored = false;
  // Image edits of this strength instead of generations.
  std::optional<double> edit;
};

// An edit's target: `s` with its first object in the next palette colour
// (after its own) that is neither the background nor another object's.
ref::Scene Recoloured(const ref::Scene& s) {
  const std::vector<std::string>& colours = ref::SceneColours();
  ref::Scene t = s;
  const auto at = std::find(colours.begin(), colours.end(), s.objects[0].colour) - colours.begin();
  for (std::size_t k = 1; k < colours.size(); ++k) {
    const std::string& c = colours[(static_cast<std::size_t>(at) + k) % colours.size()];
    bool taken = c == s.background;
    for (const ref::SceneObject& o : s.objects) {
      taken = taken || o.colour == c;
    }
    if (!taken) {
      t.objects[0].colour = c;
      break;
    }
  }
  return t;
}

// How much of the picture an edit started from it kept: the PSNR (dB, at
// most 99) of `out` against `source` over the source's background pixels
// (those of its border's median colour: everything but its objects).
double KeptPsnr(const std::vector<std::uint8_t>& source, const std::vector<std::uint8_t>& out) {
  std::array<std::vector<std::uint8_t>, 3> border;
  for (int i = 0; i < kSize; ++i) {
    for (const int px : {i, (kSize - 1) * kSize + i, i * kSize, i * kSize + kSize - 1}) {
      for (int c = 0; c < 3; ++c) {
        border[c].push_back(source[static_cast<std::size_t>(px) * 3 + c]);
      }
    }
  }
  std::array<std::uint8_t, 3> bg{};
  for (int c = 0; c < 3; ++c) {
    std::nth_element(border[c].begin(), border[c].begin() + border[c].size() / 2, border[c].end());
    bg[c] = border[c][border[c].size() / 2];
  }
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t px = 0; px < static_cast<std::size_t>(kSize) * kSize; ++px) {
    if (std::equal(bg.begin(), bg.end(), source.begin() + static_cast<std::ptrdiff_t>(px * 3))) {
      for (int c = 0; c < 3; ++c) {
        const double d = static_cast<double>(out[px * 3 + c]) - source[px * 3 + c];
        sum += d * d;
      }
      n += 3;
    }
  }
  const double mse = n > 0 ? sum / static_cast<double>(n) : 0;
  return mse <= 0 ? 99.0 : std::min(99.0, 10 * std::log10(255.0 * 255.0 / mse));
}

// Mirrors each row of an RGB picture of kSize x kSize, in place.
void MirrorRows(std::vector<std::uint8_t>& rgb) {
  for (int y = 0; y < kSize; ++y) {
    std::uint8_t* row = rgb.data() + static_cast<std::size_t>(y) * kSize * 3;
    for (int x = 0; x < kSize / 2; ++x) {
      std::swap_ranges(row + x * 3, row + x * 3 + 3, row + (kSize - 1 - x) * 3);
    }
  }
}

// Frames [w·h·3] of a result: one for a PNG, each frame of a frames archive.
Result<std::vector<std::vector<std::uint8_t>>> Pixels(const JobOutcome& o, bool video) {
  std::vector<std::string> pngs;
  if (video) {
    auto files = media::ReadTar(o.content);
    if (!files.ok()) {
      return files.status();
    }
    pngs = std::move(*files);
  } else {
    pngs.push_back(o.content);
  }
  std::vector<std::vector<std::uint8_t>> out;
  for (const std::string& p : pngs) {
    auto img = media::DecodePng(p);
    if (!img.ok()) {
      return img.status();
    }
    if (img->width != kSize || img->height != kSize) {
      return InvalidArgumentError("result is " + std::to_string(img->width) + "x" +
                                  std::to_string(img->height) + ", asked for 128x128");
    }
    out.push_back(std::move(img->rgb));
  }
  if (out.empty()) {
    return InvalidArgumentError("result holds no frame");
  }
  return out;
}

Status WriteGrid(const std::string& path, const std::vector<std::vector<std::uint8_t>>& tiles) {
  const int n = static_cast<int>(tiles.size());
  const int cols = std::min(n, 4), rows = (n + 3) / 4;
  const int w = cols * kSize, h = rows * kSize;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3, 255);
  for (int i = 0; i < n; ++i) {
    const int x0 = (i % 4) * kSize, y0 = (i / 4) * kSize;
    for (int y = 0; y < kSize; ++y) {
      std::copy_n(tiles[i].data() + static_cast<std::size_t>(y) * kSize * 3, kSize * 3,
                  rgb.data() + (static_cast<std::size_t>(y0 + y) * w + x0) * 3);
    }
  }
  auto png = media::EncodePng(rgb.data(), w, h);
  if (!png.ok()) {
    return png.status();
  }
  std::ofstream f(path, std::ios::binary);
  f << *png;
  return f.good() ? Status::Ok() : InvalidArgumentError("--grid: cannot write " + path);
}

struct Tally {
  double color = 0, shape = 0, background = 0, position = 0, direction = 0;
  int images = 0, videos = 0;
  double kept_psnr = 0;  // Edits: KeptPsnr, summed.
  void Add(const ref::SceneMarks& m) {
    color += m.color;
    shape += m.shape;
    background += m.background;
    if (m.position) {
      position += *m.position;
      ++images;
    }
    if (m.direction) {
      direction += *m.direction;
      ++videos;
    }
  }
};

int RunEval(const EvalOptions& o) {
  auto split = ref::ParseSceneSplit(o.split);
  if (!split.ok()) {
    std::cerr << "sluice eval: --" << split.status().message() << "\n";
    return 2;
  }
  if (o.edit.has_value() && (o.videos > 0 || o.mirrored)) {
    std::cerr << "sluice eval: --edit scores image edits: drop --videos and --mirrored\n";
    return 2;
  }
  std::unique_ptr<EmbeddedCluster> cluster;
  std::string base = o.server;
  if (base.empty()) {
    if (Status s = LoadReferenceWeights(o.weights); !s.ok()) {
      std::cerr << "sluice eval: --weights: " << s.message() << "\n";
      return 2;
    }
    EmbeddedConfig c;
    c.http_listen = "127.0.0.1:0";
    c.colocated = o.mode == "colocated";
    c.workers = o.workers;
    c.adapters_dir = o.adapters;
    if (c.adapters_dir.empty() && !o.lora.empty()) {  // The shipped ones, read in place.
      c.adapters_dir =
          std::filesystem::path(ref::DefaultReferenceWeights()).parent_path() / "adapters";
    }
    auto started = EmbeddedCluster::Start(c);
    if (!started.ok()) {
      std::cerr << "sluice eval: " << started.status().ToString() << "\n";
      return 1;
    }
    cluster = std::move(*started);
    base = cluster->http_endpoint();
  } else if (!o.weights.empty() || !o.adapters.empty()) {
    std::cerr << "sluice eval: --weights and --adapters: only without --server (the server "
                 "loads its own)\n";
    return 2;
  }

  auto url = BaseUrl(base);
  if (!url.ok()) {
    std::cerr << "sluice eval: --server: " << url.status().message() << "\n";
    return 2;
  }
  std::vector<ref::Scene> scenes = ref::DrawScenes(o.seed, o.prompts, *split, false);
  for (ref::Scene& v : ref::DrawScenes(o.seed + 1, o.videos, *split, true)) {
    scenes.push_back(std::move(v));
  }
  // Edits: each scene's target (recoloured), and the picture it starts
  // from (the scene as the generator renders it) with its analysis.
  std::vector<ref::Scene> targets;
  std::vector<std::string> sources;
  std::vector<std::vector<std::uint8_t>> source_rgb;
  if (o.edit.has_value()) {
    for (const ref::Scene& s : scenes) {
      targets.push_back(Recoloured(s));
      const std::vector<std::uint8_t> rgb = ref::RenderScene(s, kSize);
      auto png = media::EncodePng(rgb.data(), kSize, kSize);
      if (!png.ok()) {
        std::cerr << "sluice eval: " << png.status().ToString() << "\n";
        return 1;
      }
      sources.push_back(std::move(*png));
      source_rgb.push_back(rgb);
    }
  }
  const Clock::time_point start = Clock::now();
  struct Pending {
    std::size_t index;
    std::string id;
    Clock::time_point at;
  };
  std::deque<Pending> pending;
  std::size_t next = 0;
  Tally tally;
  int failed = 0;
  std::vector<std::vector<std::uint8_t>> grid;
  while (next < scenes.size() || !pending.empty()) {
    while (next < scenes.size() && static_cast<int>(pending.size()) < o.concurrency) {
      GenerateRequest r;
      r.prompt = o.edit.has_value() ? targets[next].Caption() : scenes[next].Caption();
      if (o.edit.has_value()) {
        r.picture = sources[next];
        r.strength = o.edit;
      }
      r.video = scenes[next].video();
      r.frames = kFrames;
      r.size = std::to_string(kSize) + "x" + std::to_string(kSize);
      r.seed = static_cast<std::int64_t>(next);
      r.steps = o.steps;
      r.guidance = o.guidance;
      r.api_key = o.api_key;
      r.lora = o.lora;
      const Clock::time_point at = Clock::now();
      auto id = Submit(*url, r);
      if (!id.ok()) {
        std::cerr << "sluice eval: submit \"" << r.prompt << "\": " << id.status().ToString()
                  << "\n";
        return 1;
      }
      pending.push_back({next++, *id, at});
    }
    const Pending p = pending.front();
    pending.pop_front();
    const ref::Scene& s = o.edit.has_value() ? targets[p.index] : scenes[p.index];
    auto outcome = WaitAndFetch(*url, p.id, false, p.at, std::chrono::seconds(o.timeout_s),
                                client::WaitOptions{o.api_key, nullptr, nullptr, {}});
    if (!outcome.ok() || outcome->status != "succeeded") {
      std::cerr << "sluice eval: \"" << s.Caption() << "\": "
                << (outcome.ok() ? outcome->status + " " + outcome->error
                                 : outcome.status().ToString())
                << "\n";
      ++failed;
      continue;
    }
    auto frames = Pixels(*outcome, s.video());
    if (!frames.ok()) {
      std::cerr << "sluice eval: \"" << s.Caption() << "\": " << frames.status().ToString() << "\n";
      ++failed;
      continue;
    }
    if (o.mirrored) {
      for (std::vector<std::uint8_t>& f : *frames) {
        MirrorRows(f);
      }
    }
    const ref::Analysis a =
        s.video() ? ref::AnalyseVideo(*frames, kSize, kSize)
                  : ref::AnalyseImage(frames->front().data(), kSize, kSize,
                                      std::max(2, static_cast<int>(s.objects.size())));
    tally.Add(ref::ScoreScene(s, a));
    if (o.edit.has_value()) {
      tally.kept_psnr += KeptPsnr(source_rgb[p.index], frames->front());
    }
    if (!o.grid.empty() && static_cast<int>(grid.size()) < kGridTiles) {
      grid.push_back(std::move(frames->front()));
      std::cerr << "grid " << grid.size() << ": " << s.Caption() << "\n";
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (cluster != nullptr) {
    cluster->Drain(std::chrono::seconds(10));
  }
  if (!grid.empty()) {
    if (Status s = WriteGrid(o.grid, grid); !s.ok()) {
      std::cerr << "sluice eval: " << s.ToString() << "\n";
      return 1;
    }
  }
  const int scored = tally.images + tally.videos;
  auto mean = [&](double sum, int n) { return n > 0 ? json(sum / n) : json(nullptr); };
  json j = {{"samples", scored},
            {"images", tally.images},
            {"videos", tally.videos},
            {"failed", failed},
            {"split", o.split},
            {"guidance", o.guidance ? json(*o.guidance) : json("server default")},
            {"mode", o.server.empty() ? o.mode : std::string("server")},
            {"lora", json(o.lora)},
            {"mirrored", o.mirrored},
            {"edit", o.edit ? json(*o.edit) : json(nullptr)},
            {"kept_psnr_db", o.edit ? mean(tally.kept_psnr, tally.images) : json(nullptr)},
            {"seconds", seconds},
            {"color_accuracy", mean(tally.color, scored)},
            {"shape_accuracy", mean(tally.shape, scored)},
            {"background_accuracy", mean(tally.background, scored)},
            {"position_accuracy", mean(tally.position, tally.images)},
            {"direction_accuracy", mean(tally.direction, tally.videos)}};
  if (o.json) {
    std::cout << j.dump() << std::endl;
  } else {
    for (const char* k : {"color_accuracy", "shape_accuracy", "position_accuracy",
                          "background_accuracy", "direction_accuracy", "kept_psnr_db"}) {
      std::printf("%-20s %s\n", k,
                  j[k].is_null() ? "-" : std::to_string(j[k].get<double>()).c_str());
    }
    std::printf("%d samples (%d images, %d videos), %d failed, %.1f s\n", scored, tally.images,
                tally.videos, failed, seconds);
  }
  return failed == 0 && scored > 0 ? 0 : 1;
}

}  // namespace

void AddEvalCommand(CLI::App& app, std::vector<Command>* out) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "score the reference model's prompt adherence (colour, shape, position, motion)");
  cmd->add_option("--prompts", o->prompts, "image prompts to generate and score")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  cmd->add_option("--videos", o->videos, "video prompts too (17 frames; direction scored)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--split", o->split, "heldout (colour-shape pairs never trained on) or train")
      ->check(CLI::IsMember({"heldout", "train"}))
      ->capture_default_str();
  cmd->add_option("--guidance", o->guidance, "classifier-free guidance (default: the server's)")
      ->check(CLI::Range(0.0, 30.0));
  cmd->add_option("--steps", o->steps, "denoise steps (default: the server's)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", o->seed, "which prompts are drawn")->capture_default_str();
  cmd->add_option("--server", o->server,
                  "a running server's HTTP endpoint (default: start an embedded deployment)");
  auto api_key = AddApiKeyFlags(cmd, &o->api_key);
  cmd->add_option("--mode", o->mode, "the embedded deployment: disagg or colocated")
      ->check(CLI::IsMember({"disagg", "colocated"}))
      ->capture_default_str();
  cmd->add_option("--workers", o->workers, "the embedded deployment's stage workers")
      ->check(CLI::Range(3, 64))
      ->capture_default_str();
  cmd->add_option("--weights", o->weights,
                  "the embedded deployment's weights: a safetensors file or random:SEED");
  cmd->add_option("--grid", o->grid, "write the first 16 outputs as one PNG (prompts to stderr)");
  cmd->add_option("--concurrency", o->concurrency, "jobs in flight at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s, "seconds to wait for each job")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  auto lora = AddLoraFlag(cmd, &o->lora);
  cmd->add_option("--adapters", o->adapters,
                  "the embedded deployment's adapters directory (default with --lora: the "
                  "shipped ones)");
  cmd->add_flag("--mirrored", o->mirrored,
                "mirror each output left to right before scoring it (for the mirror adapter: "
                "position then scores the mirrored layout)");
  cmd->add_option("--edit", o->edit,
                  "score image edits of this strength instead: each scene rendered, edited to "
                  "its first object in another colour; scored against that caption, and "
                  "against the picture outside its objects (kept_psnr_db)")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--json", o->json, "print one JSON object");
  out->push_back({cmd, [o, api_key, lora] {
                    for (Status s : {api_key(), lora()}) {
                      if (!s.ok()) {
                        std::cerr << "sluice eval: --" << s.message() << "\n";
                        return 2;
                      }
                    }
                    if (o->prompts + o->videos == 0) {
                      std::cerr << "sluice eval: --prompts and --videos are both 0\n";
                      return 2;
                    }
                    return RunEval(*o);
                  }});
}

}  // namespace sluice::cli
