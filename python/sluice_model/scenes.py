"""Captioned scenes: the reference model's training set and its scorer.

A scene is a flat background colour with one or two objects (images) or one
moving object (videos). Everything is drawn from a seeded numpy generator,
so a seed gives the same scenes, captions and pixels on every machine.

Caption grammar (every caption the generator writes; docs/models/
sluice-reference.md repeats it):

    image   := "a" OBJECT [ "and a" OBJECT ] "on a" COLOUR "background"
    OBJECT  := SIZE COLOUR SHAPE PLACE
    video   := "a" SIZE COLOUR SHAPE "moving" DIRECTION "on a" COLOUR "background"
    SIZE    := small | large
    COLOUR  := red | green | blue | yellow | purple | cyan | white | black
    SHAPE   := circle | square | triangle | diamond
    PLACE   := "on the left" | "on the right" | "at the top" | "at the bottom"
             | "in the centre"
    DIRECTION := left | right | up | down

Two objects never share a colour, neither has the background's colour, and
two-object scenes use the four outer places (never the centre) so the
objects do not overlap. A video's object crosses the frame through the
centre: "moving right" starts left of centre and ends right of it.

The held-out split: the colour-shape pairs in HELD_OUT_PAIRS never appear in
a training scene (in any object); evaluation draws scenes whose first
object is such a pair. The analyser (`analyse_image`, `analyse_video`)
inverts the generator: background, each object's colour, shape, size and
place, and a video's direction.
"""

import dataclasses
import itertools
from typing import List, Optional, Sequence, Tuple

import numpy as np

COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 30),
    "purple": (150, 40, 190),
    "cyan": (30, 200, 220),
    "white": (240, 240, 240),
    "black": (15, 15, 15),
}
COLOUR_NAMES = list(COLOURS)
SHAPES = ["circle", "square", "triangle", "diamond"]
SIZES = {"small": 0.07, "large": 0.125}  # Half the object's extent, in image sides.
PLACES = {
    "left": ((0.22, 0.5), "on the left"),
    "right": ((0.78, 0.5), "on the right"),
    "top": ((0.5, 0.22), "at the top"),
    "bottom": ((0.5, 0.78), "at the bottom"),
    "centre": ((0.5, 0.5), "in the centre"),
}
OUTER_PLACES = ["left", "right", "top", "bottom"]
DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
HELD_OUT_PAIRS = {("red", "triangle"), ("green", "diamond"), ("blue", "circle"),
                  ("yellow", "square"), ("cyan", "triangle"), ("white", "diamond")}
JITTER = 0.01  # Largest random offset of an object's centre, in image sides.
TRAVEL = 0.22  # A video object's distance from the centre at its first and last frame.

# Every word the grammar uses, in the order the tokenizer numbers them.
VOCABULARY = (["a", "and", "on", "the", "at", "in", "moving", "background"] + list(SIZES)
              + COLOUR_NAMES + SHAPES + ["left", "right", "top", "bottom", "centre", "up",
                                         "down"])


@dataclasses.dataclass(frozen=True)
class SceneObject:
    size: str
    colour: str
    shape: str
    place: str  # A PLACES key (images) or the centre a video object crosses.
    dx: float = 0.0  # Jitter of the centre, in image sides.
    dy: float = 0.0


@dataclasses.dataclass(frozen=True)
class Scene:
    background: str
    objects: Tuple[SceneObject, ...]
    direction: Optional[str] = None  # Videos only.

    def caption(self) -> str:
        if self.direction is not None:
            o = self.objects[0]
            return (f"a {o.size} {o.colour} {o.shape} moving {self.direction} "
                    f"on a {self.background} background")
        parts = [f"{o.size} {o.colour} {o.shape} {PLACES[o.place][1]}" for o in self.objects]
        return "a " + " and a ".join(parts) + f" on a {self.background} background"


def is_held_out(scene: Scene) -> bool:
    return any((o.colour, o.shape) in HELD_OUT_PAIRS for o in scene.objects)


def _draw_object(rng: np.random.Generator, taken: Sequence[str], places: Sequence[str],
                 colours: Sequence[str]) -> SceneObject:
    colour = str(rng.choice([c for c in colours if c not in taken]))
    return SceneObject(size=str(rng.choice(list(SIZES))), colour=colour,
                       shape=str(rng.choice(SHAPES)), place=str(rng.choice(places)),
                       dx=float(rng.uniform(-JITTER, JITTER)),
                       dy=float(rng.uniform(-JITTER, JITTER)))


def random_scene(rng: np.random.Generator, split: str = "train", video: bool = False,
                 two_objects: float = 0.3) -> Scene:
    """One scene of `split` ("train": no held-out pair; "heldout": the
    first object is a held-out pair). `two_objects`: the chance of a
    second object (images only)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split: 'train' or 'heldout', not {split!r}")
    while True:
        background = str(rng.choice(COLOUR_NAMES))
        if split == "heldout":
            colour, shape = sorted(HELD_OUT_PAIRS)[int(rng.integers(len(HELD_OUT_PAIRS)))]
            if colour == background:
                continue
            first = dataclasses.replace(_draw_object(rng, [background], list(PLACES), COLOUR_NAMES),
                                        colour=colour, shape=shape)
        else:
            first = _draw_object(rng, [background], list(PLACES), COLOUR_NAMES)
        objects = [first]
        if not video and rng.uniform() < two_objects:
            first = dataclasses.replace(first, place=str(rng.choice(OUTER_PLACES)))
            second = _draw_object(rng, [background, first.colour],
                                  [p for p in OUTER_PLACES if p != first.place], COLOUR_NAMES)
            objects = [first, second]
        direction = None
        if video:
            objects = [dataclasses.replace(objects[0], place="centre")]
            direction = str(rng.choice(list(DIRECTIONS)))
        scene = Scene(background, tuple(objects), direction)
        if split == "train" and is_held_out(scene):
            continue
        if split == "heldout" and any((o.colour, o.shape) in HELD_OUT_PAIRS
                                      for o in scene.objects[1:]):
            continue
        return scene


def shape_mask(shape: str, cx: float, cy: float, r: float, size: int) -> np.ndarray:
    """Boolean [size, size] mask of `shape` filling the square of half-side r
    (pixels) around (cx, cy); pixel centres are sampled."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    u, v = (xs - cx) / r, (ys - cy) / r  # The square is [-1, 1]².
    if shape == "circle":
        return u * u + v * v <= 1.0
    if shape == "square":
        return (np.abs(u) <= 1.0) & (np.abs(v) <= 1.0)
    if shape == "diamond":
        return np.abs(u) + np.abs(v) <= 1.0
    if shape == "triangle":  # Apex at the top centre, base along the bottom.
        return (v <= 1.0) & (v >= -1.0) & (np.abs(u) <= (v + 1.0) / 2.0)
    raise ValueError(f"shape: unknown {shape!r}")


def _centre(o: SceneObject, size: int, offset: Tuple[float, float] = (0.0, 0.0)):
    (px, py), _ = PLACES[o.place]
    return (px + o.dx + offset[0]) * size, (py + o.dy + offset[1]) * size


def render(scene: Scene, size: int = 128, frame: int = 0, frames: int = 1) -> np.ndarray:
    """uint8 [size, size, 3]: the scene, or frame `frame` of `frames` of a video."""
    img = np.empty((size, size, 3), np.uint8)
    img[:] = COLOURS[scene.background]
    offset = (0.0, 0.0)
    if scene.direction is not None:
        ux, uy = DIRECTIONS[scene.direction]
        a = -TRAVEL + 2 * TRAVEL * (frame / max(frames - 1, 1))
        offset = (ux * a, uy * a)
    for o in scene.objects:
        cx, cy = _centre(o, size, offset)
        img[shape_mask(o.shape, cx, cy, SIZES[o.size] * size, size)] = COLOURS[o.colour]
    return img


def render_video(scene: Scene, size: int = 128, frames: int = 17) -> np.ndarray:
    """uint8 [frames, size, size, 3]."""
    return np.stack([render(scene, size, f, frames) for f in range(frames)])


# ---------------------------------------------------------------------------
# The analyser.

_PALETTE = np.array([COLOURS[c] for c in COLOUR_NAMES], np.float64)


def nearest_colour(rgb) -> str:
    d = ((_PALETTE - np.asarray(rgb, np.float64)) ** 2).sum(axis=1)
    return COLOUR_NAMES[int(np.argmin(d))]


def _label_map(img: np.ndarray) -> np.ndarray:
    """Each pixel's nearest palette colour index [h, w]."""
    flat = img.reshape(-1, 3).astype(np.float64)
    d = ((flat[:, None, :] - _PALETTE[None, :, :]) ** 2).sum(axis=2)
    return np.argmin(d, axis=1).reshape(img.shape[:2])


def _components(mask: np.ndarray) -> List[np.ndarray]:
    """4-connected components of a boolean mask, each as a boolean mask."""
    h, w = mask.shape
    seen = np.zeros_like(mask)
    out = []
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        comp = np.zeros_like(mask)
        stack = [(y0, x0)]
        seen[y0, x0] = True
        while stack:
            y, x = stack.pop()
            comp[y, x] = True
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        out.append(comp)
    return out


@dataclasses.dataclass
class Detected:
    colour: str
    shape: str
    size: str
    place: str
    cx: float  # Centroid, in image sides.
    cy: float
    area: int


# Each shape's area in units of its half-extent r squared.
_SHAPE_AREA = {"circle": np.pi, "square": 4.0, "diamond": 2.0, "triangle": 2.0}


def _best_shape(comp: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> str:
    """The shape whose template of the component's area, centred on its
    centroid, overlaps it most (intersection over union). Fitting area and
    centroid rather than the bounding box keeps the answer when a decoder
    softens corners or adds a pixel of wobble to an edge: a box one pixel
    too tall turned a slightly rounded square into a circle."""
    area = len(xs)
    mx, my = xs.mean() + 0.5, ys.mean() + 0.5
    best, best_iou = SHAPES[0], -1.0
    for shape in SHAPES:
        r = float(np.sqrt(area / _SHAPE_AREA[shape]))
        # A triangle's centroid lies r/3 below its box's centre (apex up).
        tmpl = shape_mask(shape, mx, my - r / 3.0 if shape == "triangle" else my, r, comp.shape[0])
        iou = (tmpl & comp).sum() / max((tmpl | comp).sum(), 1)
        if iou > best_iou:
            best, best_iou = shape, iou
    return best


def _classify(comp: np.ndarray, img: np.ndarray) -> Detected:
    size = img.shape[0]
    ys, xs = np.nonzero(comp)
    colour = nearest_colour(np.median(img[ys, xs].astype(np.float64), axis=0))
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    r = max(x1 - x0, y1 - y0) / 2.0
    bx, by = (x0 + x1) / 2.0, (y0 + y1) / 2.0
    best = _best_shape(comp, xs, ys)
    cx, cy = bx / size, by / size
    place = min(PLACES, key=lambda p: (PLACES[p][0][0] - cx) ** 2 + (PLACES[p][0][1] - cy) ** 2)
    small, large = SIZES["small"], SIZES["large"]
    size_name = "small" if r / size < (small + large) / 2 else "large"
    return Detected(colour, best, size_name, place, cx, cy, int(comp.sum()))


def analyse_image(img: np.ndarray, max_objects: int = 2):
    """(background colour, [Detected], largest first) of an RGB uint8 image.
    Objects are the 4-connected regions whose nearest palette colour is not
    the background's, of at least 0.4% of the image."""
    h, w = img.shape[:2]
    border = np.concatenate([img[0], img[-1], img[:, 0], img[:, -1]]).astype(np.float64)
    background = nearest_colour(np.median(border, axis=0))
    labels = _label_map(img)
    mask = labels != COLOUR_NAMES.index(background)
    comps = [c for c in _components(mask) if c.sum() >= 0.004 * h * w]
    comps.sort(key=lambda c: -int(c.sum()))
    return background, [_classify(c, img) for c in comps[:max_objects]]


def analyse_video(frames: np.ndarray) -> Tuple[str, Optional[Detected], Optional[str]]:
    """(background, the first frame's largest object, direction) of
    [frames, h, w, 3]: the direction the largest object's centroid moved
    from the first frame to the last (None when it is not found in both)."""
    bg, first = analyse_image(frames[0], 1)
    _, last = analyse_image(frames[-1], 1)
    if not first or not last:
        return bg, first[0] if first else None, None
    dx, dy = last[0].cx - first[0].cx, last[0].cy - first[0].cy
    if abs(dx) >= abs(dy):
        direction = "right" if dx > 0 else "left"
    else:
        direction = "down" if dy > 0 else "up"
    return bg, first[0], direction


def score(scene: Scene, output: np.ndarray) -> dict:
    """Per-attribute correctness (1.0 / 0.0, averaged over objects) of an
    image [h, w, 3] or video [frames, h, w, 3] generated for `scene`.
    Objects are matched to detections by the assignment agreeing on most
    attributes."""
    if scene.direction is not None:
        bg, det, direction = analyse_video(output)
        dets = [det] if det is not None else []
    else:
        bg, dets = analyse_image(output, max(2, len(scene.objects)))
        direction = None
    want = list(scene.objects)

    def agree(o, d):
        return {"color": float(d is not None and d.colour == o.colour),
                "shape": float(d is not None and d.shape == o.shape),
                "position": float(d is not None and d.place == o.place)}

    padded = dets + [None] * max(0, len(want) - len(dets))
    best = None
    for perm in itertools.permutations(padded, len(want)):
        marks = [agree(o, d) for o, d in zip(want, perm)]
        total = sum(sum(m.values()) for m in marks)
        if best is None or total > best[0]:
            best = (total, marks)
    marks = best[1]
    out = {k: sum(m[k] for m in marks) / len(marks) for k in ("color", "shape", "position")}
    out["background"] = float(bg == scene.background)
    if scene.direction is not None:
        out["direction"] = float(direction == scene.direction)
        del out["position"]  # A video's object has no resting place.
    return out


def tokenize(text: str, vocabulary: Sequence[str] = VOCABULARY, length: int = 64,
             vocab_rows: int = 256) -> List[int]:
    """Token ids of `text` as the reference text encoder reads them: 1 (BOS),
    then one id per word (lower-cased runs of ASCII letters and digits):
    2 + its index in `vocabulary`, or for another word a bucket of its
    FNV-1a hash in [2 + len(vocabulary), vocab_rows); padded with 0 to
    `length` (truncated at length)."""
    words, cur = [], []
    for ch in text:
        if ch.isascii() and ch.isalnum():
            cur.append(ch.lower())
        else:
            if cur:
                words.append("".join(cur))
            cur = []
    if cur:
        words.append("".join(cur))
    index = {w: i for i, w in enumerate(vocabulary)}
    first_bucket = 2 + len(vocabulary)
    buckets = vocab_rows - first_bucket
    ids = [1]
    for w in words:
        if w in index:
            ids.append(2 + index[w])
        else:
            h = 0x811C9DC5
            for b in w.encode():
                h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
            ids.append(first_bucket + h % buckets)
    ids = ids[:length]
    return ids + [0] * (length - len(ids))
