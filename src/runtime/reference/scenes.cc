#include "runtime/reference/scenes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numbers>
#include <string_view>
#include <utility>

namespace sluice::reference {
namespace {

struct Rgb {
  double r, g, b;
};

// scenes.py's palette, in its order.
constexpr std::array<std::pair<const char*, Rgb>, 8> kPalette = {{{"red", {220, 30, 30}},
                                                                  {"green", {30, 170, 50}},
                                                                  {"blue", {30, 60, 220}},
                                                                  {"yellow", {240, 220, 30}},
                                                                  {"purple", {150, 40, 190}},
                                                                  {"cyan", {30, 200, 220}},
                                                                  {"white", {240, 240, 240}},
                                                                  {"black", {15, 15, 15}}}};
constexpr std::array<const char*, 4> kShapes = {"circle", "square", "triangle", "diamond"};
constexpr double kSmall = 0.07, kLarge = 0.125;  // Half an object's extent, in image sides.
struct Place {
  const char* name;
  double x, y;
  const char* words;
};
constexpr std::array<Place, 5> kPlaces = {{{"left", 0.22, 0.5, "on the left"},
                                           {"right", 0.78, 0.5, "on the right"},
                                           {"top", 0.5, 0.22, "at the top"},
                                           {"bottom", 0.5, 0.78, "at the bottom"},
                                           {"centre", 0.5, 0.5, "in the centre"}}};
constexpr std::array<const char*, 4> kOuterPlaces = {"left", "right", "top", "bottom"};
struct Direction {
  const char* name;
  int dx, dy;
};
constexpr std::array<Direction, 4> kDirections = {
    {{"left", -1, 0}, {"right", 1, 0}, {"up", 0, -1}, {"down", 0, 1}}};
// sorted(scenes.HELD_OUT_PAIRS).
constexpr std::array<std::pair<const char*, const char*>, 6> kHeldOut = {{{"blue", "circle"},
                                                                          {"cyan", "triangle"},
                                                                          {"green", "diamond"},
                                                                          {"red", "triangle"},
                                                                          {"white", "diamond"},
                                                                          {"yellow", "square"}}};
constexpr double kJitter = 0.01, kTravel = 0.22, kTwoObjects = 0.3;

bool IsHeldOut(const SceneObject& o) {
  return std::any_of(kHeldOut.begin(), kHeldOut.end(),
                     [&](const auto& p) { return o.colour == p.first && o.shape == p.second; });
}

const Place& PlaceOf(const std::string& name) {
  for (const Place& p : kPlaces) {
    if (name == p.name) {
      return p;
    }
  }
  return kPlaces.back();
}

Rgb ColourOf(const std::string& name) {
  for (const auto& [n, c] : kPalette) {
    if (name == n) {
      return c;
    }
  }
  return kPalette.back().second;
}

double HalfSize(const std::string& size) {
  return size == "small" ? kSmall : kLarge;
}

class SceneRng {
 public:
  explicit SceneRng(std::uint64_t seed) : state_(seed * 0x2545f4914f6cdd1dULL + 0x5ce4e5b9ULL) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t Below(std::size_t n) { return static_cast<std::size_t>(Next() % n); }
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  std::uint64_t state_;
};

SceneObject DrawObject(SceneRng& rng, const std::vector<std::string>& taken,
                       const std::vector<std::string>& places) {
  std::vector<std::string> colours;
  for (const auto& [name, rgb] : kPalette) {
    if (std::find(taken.begin(), taken.end(), name) == taken.end()) {
      colours.emplace_back(name);
    }
  }
  SceneObject o;
  o.colour = colours[rng.Below(colours.size())];
  o.size = rng.Below(2) == 0 ? "small" : "large";
  o.shape = kShapes[rng.Below(kShapes.size())];
  o.place = places[rng.Below(places.size())];
  o.dx = (rng.Uniform() * 2 - 1) * kJitter;
  o.dy = (rng.Uniform() * 2 - 1) * kJitter;
  return o;
}

Scene DrawScene(SceneRng& rng, SceneSplit split, bool video) {
  std::vector<std::string> all_places, outer(kOuterPlaces.begin(), kOuterPlaces.end());
  for (const Place& p : kPlaces) {
    all_places.emplace_back(p.name);
  }
  while (true) {
    Scene s;
    s.background = kPalette[rng.Below(kPalette.size())].first;
    SceneObject first;
    if (split == SceneSplit::kHeldOut) {
      const auto& pair = kHeldOut[rng.Below(kHeldOut.size())];
      if (s.background == pair.first) {
        continue;
      }
      first = DrawObject(rng, {s.background}, all_places);
      first.colour = pair.first;
      first.shape = pair.second;
    } else {
      first = DrawObject(rng, {s.background}, all_places);
    }
    s.objects.push_back(first);
    if (!video && rng.Uniform() < kTwoObjects) {
      s.objects[0].place = outer[rng.Below(outer.size())];
      std::vector<std::string> rest;
      for (const std::string& p : outer) {
        if (p != s.objects[0].place) {
          rest.push_back(p);
        }
      }
      s.objects.push_back(DrawObject(rng, {s.background, s.objects[0].colour}, rest));
    }
    if (video) {
      s.objects[0].place = "centre";
      s.direction = kDirections[rng.Below(kDirections.size())].name;
    }
    const bool first_held = IsHeldOut(s.objects[0]);
    const bool later_held = s.objects.size() > 1 && IsHeldOut(s.objects[1]);
    if (split == SceneSplit::kTrain && (first_held || later_held)) {
      continue;
    }
    if (split == SceneSplit::kHeldOut && later_held) {
      continue;
    }
    return s;
  }
}

// scenes.shape_mask at one pixel: pixel centres (x + 0.5, y + 0.5) inside
// `shape` filling the square of half-side r around (cx, cy).
bool InShape(const std::string& shape, double cx, double cy, double r, int x, int y) {
  const double u = (x + 0.5 - cx) / r, v = (y + 0.5 - cy) / r;
  if (shape == "circle") {
    return u * u + v * v <= 1.0;
  }
  if (shape == "square") {
    return std::abs(u) <= 1.0 && std::abs(v) <= 1.0;
  }
  if (shape == "diamond") {
    return std::abs(u) + std::abs(v) <= 1.0;
  }
  return v <= 1.0 && v >= -1.0 && std::abs(u) <= (v + 1.0) / 2.0;  // triangle
}

double Median(std::vector<double>& v) {
  const std::size_t n = v.size(), mid = n / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (n % 2 == 1) {
    return hi;
  }
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

std::size_t NearestColour(double r, double g, double b) {
  std::size_t best = 0;
  double best_d = 0;
  for (std::size_t i = 0; i < kPalette.size(); ++i) {
    const Rgb& c = kPalette[i].second;
    const double d = (c.r - r) * (c.r - r) + (c.g - g) * (c.g - g) + (c.b - b) * (c.b - b);
    if (i == 0 || d < best_d) {
      best = i;
      best_d = d;
    }
  }
  return best;
}

// The nearest palette colour of the per-channel median of `pixels`
// (indices into rgb).
std::size_t MedianColour(const std::uint8_t* rgb, const std::vector<std::size_t>& pixels) {
  std::array<std::vector<double>, 3> ch;
  for (auto& c : ch) {
    c.reserve(pixels.size());
  }
  for (std::size_t p : pixels) {
    for (int c = 0; c < 3; ++c) {
      ch[c].push_back(rgb[p * 3 + c]);
    }
  }
  return NearestColour(Median(ch[0]), Median(ch[1]), Median(ch[2]));
}

// Each shape's area in units of its half-extent r squared.
double ShapeArea(std::string_view shape) {
  if (shape == "circle") {
    return std::numbers::pi;
  }
  return shape == "square" ? 4.0 : 2.0;  // diamond, triangle
}

// scenes._best_shape: the shape whose template of the component's area,
// centred on its centroid, overlaps it most (intersection over union).
// Fitting area and centroid rather than the bounding box keeps the answer
// when a decoder softens corners or adds a pixel of wobble to an edge.
std::string BestShape(const std::vector<std::size_t>& comp, int width, int height,
                      const std::vector<int>& label, int id) {
  double sx = 0, sy = 0;
  for (std::size_t p : comp) {
    sx += static_cast<double>(p % width);
    sy += static_cast<double>(p / width);
  }
  const auto area = static_cast<double>(comp.size());
  const double mx = sx / area + 0.5, my = sy / area + 0.5;
  std::string best;
  double best_iou = -1;
  for (const char* name : kShapes) {
    const std::string shape = name;  // Once, not per pixel (InShape takes a string).
    const double r = std::sqrt(area / ShapeArea(shape));
    // A triangle's centroid lies r/3 below its box's centre (apex up).
    const double cy = shape == "triangle" ? my - r / 3.0 : my;
    const int tx0 = std::max(0, static_cast<int>(std::floor(mx - r)) - 1);
    const int tx1 = std::min(width, static_cast<int>(std::ceil(mx + r)) + 1);
    const int ty0 = std::max(0, static_cast<int>(std::floor(cy - r)) - 1);
    const int ty1 = std::min(height, static_cast<int>(std::ceil(cy + r)) + 1);
    std::int64_t inter = 0, in_template = 0;
    for (int y = ty0; y < ty1; ++y) {
      for (int x = tx0; x < tx1; ++x) {
        if (InShape(shape, mx, cy, r, x, y)) {
          ++in_template;
          inter += label[static_cast<std::size_t>(y) * width + x] == id;
        }
      }
    }
    const std::int64_t uni = in_template + static_cast<std::int64_t>(comp.size()) - inter;
    const double iou =
        static_cast<double>(inter) / static_cast<double>(std::max<std::int64_t>(uni, 1));
    if (iou > best_iou) {
      best_iou = iou;
      best = shape;
    }
  }
  return best;
}

DetectedObject Classify(const std::uint8_t* rgb, int width, int height,
                        const std::vector<std::size_t>& comp, const std::vector<int>& label,
                        int id) {
  DetectedObject d;
  d.colour = kPalette[MedianColour(rgb, comp)].first;
  int x0 = width, x1 = 0, y0 = height, y1 = 0;
  for (std::size_t p : comp) {
    const int x = static_cast<int>(p % width), y = static_cast<int>(p / width);
    x0 = std::min(x0, x);
    x1 = std::max(x1, x + 1);
    y0 = std::min(y0, y);
    y1 = std::max(y1, y + 1);
  }
  const double r = std::max(x1 - x0, y1 - y0) / 2.0;
  const double bx = (x0 + x1) / 2.0, by = (y0 + y1) / 2.0;
  d.shape = BestShape(comp, width, height, label, id);
  d.cx = bx / width;
  d.cy = by / height;
  double best_d = 0;
  for (std::size_t i = 0; i < kPlaces.size(); ++i) {
    const double dd = (kPlaces[i].x - d.cx) * (kPlaces[i].x - d.cx) +
                      (kPlaces[i].y - d.cy) * (kPlaces[i].y - d.cy);
    if (i == 0 || dd < best_d) {
      best_d = dd;
      d.place = kPlaces[i].name;
    }
  }
  d.size = r / width < (kSmall + kLarge) / 2 ? "small" : "large";
  d.area = static_cast<std::int64_t>(comp.size());
  return d;
}

}  // namespace

std::string Scene::Caption() const {
  if (video()) {
    const SceneObject& o = objects.at(0);
    return "a " + o.size + " " + o.colour + " " + o.shape + " moving " + direction + " on a " +
           background + " background";
  }
  std::string out = "a ";
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const SceneObject& o = objects[i];
    out += (i ? " and a " : "") + o.size + " " + o.colour + " " + o.shape + " " +
           PlaceOf(o.place).words;
  }
  return out + " on a " + background + " background";
}

Result<SceneSplit> ParseSceneSplit(const std::string& name) {
  if (name == "train") {
    return SceneSplit::kTrain;
  }
  if (name == "heldout") {
    return SceneSplit::kHeldOut;
  }
  return InvalidArgumentError("split: \"" + name + "\" is not train or heldout");
}

const std::vector<std::string>& SceneColours() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, rgb] : kPalette) {
      v.emplace_back(name);
    }
    return v;
  }();
  return names;
}

std::vector<Scene> DrawScenes(std::uint64_t seed, int n, SceneSplit split, bool video) {
  SceneRng rng(seed);
  std::vector<Scene> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(DrawScene(rng, split, video));
  }
  return out;
}

std::vector<std::uint8_t> RenderScene(const Scene& s, int size, int frame, int frames) {
  std::vector<std::uint8_t> img(static_cast<std::size_t>(size) * size * 3);
  const Rgb bg = ColourOf(s.background);
  for (std::size_t p = 0; p < img.size(); p += 3) {
    img[p] = static_cast<std::uint8_t>(bg.r);
    img[p + 1] = static_cast<std::uint8_t>(bg.g);
    img[p + 2] = static_cast<std::uint8_t>(bg.b);
  }
  double ox = 0, oy = 0;
  if (s.video()) {
    for (const Direction& d : kDirections) {
      if (s.direction == d.name) {
        const double a =
            -kTravel + 2 * kTravel * (frame / static_cast<double>(std::max(frames - 1, 1)));
        ox = d.dx * a;
        oy = d.dy * a;
      }
    }
  }
  for (const SceneObject& o : s.objects) {
    const Place& pl = PlaceOf(o.place);
    const double cx = (pl.x + o.dx + ox) * size, cy = (pl.y + o.dy + oy) * size;
    const double r = HalfSize(o.size) * size;
    const Rgb c = ColourOf(o.colour);
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        if (InShape(o.shape, cx, cy, r, x, y)) {
          const std::size_t p = (static_cast<std::size_t>(y) * size + x) * 3;
          img[p] = static_cast<std::uint8_t>(c.r);
          img[p + 1] = static_cast<std::uint8_t>(c.g);
          img[p + 2] = static_cast<std::uint8_t>(c.b);
        }
      }
    }
  }
  return img;
}

Analysis AnalyseImage(const std::uint8_t* rgb, int width, int height, int max_objects) {
  Analysis a;
  const std::size_t n = static_cast<std::size_t>(width) * height;
  std::vector<std::size_t> border;
  for (int x = 0; x < width; ++x) {
    border.push_back(static_cast<std::size_t>(x));
  }
  for (int x = 0; x < width; ++x) {
    border.push_back(static_cast<std::size_t>(height - 1) * width + x);
  }
  for (int y = 0; y < height; ++y) {
    border.push_back(static_cast<std::size_t>(y) * width);
  }
  for (int y = 0; y < height; ++y) {
    border.push_back(static_cast<std::size_t>(y) * width + width - 1);
  }
  const std::size_t bg = MedianColour(rgb, border);
  a.background = kPalette[bg].first;
  // Components of pixels whose nearest colour is not the background's, in
  // the row-major order of their first pixel; label -1: background.
  std::vector<int> label(n, -1);
  std::vector<std::vector<std::size_t>> comps;
  std::vector<bool> object(n);
  for (std::size_t p = 0; p < n; ++p) {
    object[p] = NearestColour(rgb[p * 3], rgb[p * 3 + 1], rgb[p * 3 + 2]) != bg;
  }
  for (std::size_t start = 0; start < n; ++start) {
    if (!object[start] || label[start] >= 0) {
      continue;
    }
    const int id = static_cast<int>(comps.size());
    std::vector<std::size_t> comp{start}, stack{start};
    label[start] = id;
    while (!stack.empty()) {
      const std::size_t p = stack.back();
      stack.pop_back();
      const int x = static_cast<int>(p % width), y = static_cast<int>(p / width);
      const std::array<std::pair<int, int>, 4> next = {
          {{x, y - 1}, {x, y + 1}, {x - 1, y}, {x + 1, y}}};
      for (const auto& [nx, ny] : next) {
        if (nx < 0 || ny < 0 || nx >= width || ny >= height) {
          continue;
        }
        const std::size_t q = static_cast<std::size_t>(ny) * width + nx;
        if (object[q] && label[q] < 0) {
          label[q] = id;
          comp.push_back(q);
          stack.push_back(q);
        }
      }
    }
    comps.push_back(std::move(comp));
  }
  std::vector<int> kept;
  for (std::size_t i = 0; i < comps.size(); ++i) {
    if (static_cast<double>(comps[i].size()) >= 0.004 * static_cast<double>(n)) {
      kept.push_back(static_cast<int>(i));
    }
  }
  std::stable_sort(kept.begin(), kept.end(),
                   [&](int x, int y) { return comps[x].size() > comps[y].size(); });
  for (std::size_t i = 0; i < kept.size() && static_cast<int>(i) < max_objects; ++i) {
    a.objects.push_back(Classify(rgb, width, height, comps[kept[i]], label, kept[i]));
  }
  return a;
}

Analysis AnalyseVideo(const std::vector<std::vector<std::uint8_t>>& frames, int width, int height) {
  Analysis first = AnalyseImage(frames.front().data(), width, height, 1);
  const Analysis last = AnalyseImage(frames.back().data(), width, height, 1);
  if (first.objects.empty() || last.objects.empty()) {
    return first;
  }
  const double dx = last.objects[0].cx - first.objects[0].cx;
  const double dy = last.objects[0].cy - first.objects[0].cy;
  if (std::abs(dx) >= std::abs(dy)) {
    first.direction = dx > 0 ? "right" : "left";
  } else {
    first.direction = dy > 0 ? "down" : "up";
  }
  return first;
}

SceneMarks ScoreScene(const Scene& s, const Analysis& a) {
  const std::size_t want = s.objects.size();
  std::vector<const DetectedObject*> padded;
  for (const DetectedObject& d : a.objects) {
    padded.push_back(&d);
  }
  while (padded.size() < want) {
    padded.push_back(nullptr);
  }
  // Every ordered choice of `want` detections (itertools.permutations'
  // order); the first with the most agreeing attributes wins.
  struct Marks {
    double color = 0, shape = 0, position = 0;
  };
  Marks best;
  double best_total = -1;
  std::vector<std::size_t> pick;
  std::vector<bool> used(padded.size());
  std::function<void()> visit = [&] {
    if (pick.size() == want) {
      Marks m;
      for (std::size_t i = 0; i < want; ++i) {
        const SceneObject& o = s.objects[i];
        const DetectedObject* d = padded[pick[i]];
        m.color += d != nullptr && d->colour == o.colour;
        m.shape += d != nullptr && d->shape == o.shape;
        m.position += d != nullptr && d->place == o.place;
      }
      const double total = m.color + m.shape + (s.video() ? 0 : m.position);
      if (total > best_total) {
        best_total = total;
        best = m;
      }
      return;
    }
    for (std::size_t j = 0; j < padded.size(); ++j) {
      if (!used[j]) {
        used[j] = true;
        pick.push_back(j);
        visit();
        pick.pop_back();
        used[j] = false;
      }
    }
  };
  visit();
  const double k = static_cast<double>(want);
  SceneMarks out;
  out.color = best.color / k;
  out.shape = best.shape / k;
  out.background = a.background == s.background ? 1.0 : 0.0;
  if (s.video()) {
    out.direction = a.direction == s.direction ? 1.0 : 0.0;
  } else {
    out.position = best.position / k;
  }
  return out;
}

}  // namespace sluice::reference
