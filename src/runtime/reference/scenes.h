// Captioned scenes of the reference model's grammar and the analyser that
// scores a generated picture against its caption: the C++ side of
// python/sluice_model/scenes.py (same palette, shapes, sizes, places,
// held-out colour-shape pairs, caption grammar and analysis), so
// `sluice eval` measures prompt adherence without Python.
//
// Scenes drawn here come from this file's own seeded generator
// (splitmix64), not numpy's: the same seed gives the same prompts on every
// machine, but not the prompts scenes.py draws for that seed. Rendering
// and analysis follow scenes.py's definitions (pixel centres, medians,
// 4-connected regions, template IoU).
//
// Thread safety: free functions over values; no shared state.
#ifndef SLUICE_RUNTIME_REFERENCE_SCENES_H_
#define SLUICE_RUNTIME_REFERENCE_SCENES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::reference {

struct SceneObject {
  std::string size;       // small | large
  std::string colour;     // One of SceneColours().
  std::string shape;      // circle | square | triangle | diamond
  std::string place;      // left | right | top | bottom | centre
  double dx = 0, dy = 0;  // Jitter of the centre, in image sides.
};

struct Scene {
  std::string background;
  std::vector<SceneObject> objects;  // One or two; videos one.
  std::string direction;             // Videos: left | right | up | down; images empty.
  bool video() const { return !direction.empty(); }
  // The caption in the grammar of docs/models/sluice-reference.md.
  std::string Caption() const;
};

enum class SceneSplit { kTrain, kHeldOut };
// "train" | "heldout". Errors: kInvalidArgument naming the value.
Result<SceneSplit> ParseSceneSplit(const std::string& name);

// The 8 colour names in palette order.
const std::vector<std::string>& SceneColours();

// `n` scenes of `split` from `seed`: images (one object, or two on the
// outer places with probability 0.3) or, with `video`, one object crossing
// the centre. kTrain never holds a held-out pair; kHeldOut's first object
// is one, its second never.
std::vector<Scene> DrawScenes(std::uint64_t seed, int n, SceneSplit split, bool video);

// The scene as scenes.render draws it: rgb [size][size][3], or frame
// `frame` of `frames` of a video.
std::vector<std::uint8_t> RenderScene(const Scene& s, int size, int frame = 0, int frames = 1);

// One object the analyser found.
struct DetectedObject {
  std::string colour, shape, size, place;
  double cx = 0, cy = 0;  // Bounding-box centre, in image sides.
  std::int64_t area = 0;  // Pixels.
};

struct Analysis {
  std::string background;
  std::vector<DetectedObject> objects;  // Largest first.
  std::string direction;                // Videos: where the largest object moved.
};

// The background (the border's median colour) and up to `max_objects`
// objects (4-connected regions of another palette colour, ≥ 0.4% of the
// picture) of rgb [height][width][3].
Analysis AnalyseImage(const std::uint8_t* rgb, int width, int height, int max_objects);
// The first frame's analysis with the direction the largest object moved
// from the first frame to the last (empty when it is missing in either).
// REQUIRES: frames non-empty, each width·height·3 bytes.
Analysis AnalyseVideo(const std::vector<std::vector<std::uint8_t>>& frames, int width, int height);

// Per-attribute correctness in [0, 1] of an analysis against its scene:
// objects matched to detections by the assignment agreeing on most
// attributes. Images: colour, shape, position, background; videos:
// colour, shape, background, direction (position is absent).
struct SceneMarks {
  double color = 0, shape = 0, background = 0;
  std::optional<double> position, direction;
};
SceneMarks ScoreScene(const Scene& s, const Analysis& a);

}  // namespace sluice::reference

#endif  // SLUICE_RUNTIME_REFERENCE_SCENES_H_
