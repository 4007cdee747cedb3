"""Caches on store objects: standard keys (docs/design/cache-keys.md), the same as
C++'s `sluice/cache/keys.h` (SHA-256 over a canonical encoding of everything
that determines a cached value, so a worker in either language finds what
another computed), and `Cache`, single-flight get-or-compute on a
`sluice.Store`.

A field's Python type picks its encoded type: `str` text, `int` a 64-bit
integer, `float` a binary64 float, a list of ints or of strs a list. An empty
list says nothing of its type: pass `ints([])` or `texts([])`. `bool` is
refused (say 0/1 or "true"/"false").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import struct
from typing import Dict, Iterable, List, Mapping, Sequence, Union

from . import _sluice
from .errors import InvalidArgumentError, translated

_MAGIC = b"sluice-cache-key-v1\0"
_TEXT, _INT, _FLOAT, _INT_LIST, _TEXT_LIST = 1, 2, 3, 4, 5
_KIND = re.compile(r"[a-z0-9_]{1,32}")
_NAME = re.compile(r"[a-z0-9_.]{1,128}")
_NAMESPACE = re.compile(r"[a-z0-9_.]{1,64}")


class ints(list):
    """A list field of 64-bit integers (needed only when it may be empty)."""


class texts(list):
    """A list field of texts (needed only when it may be empty)."""


FieldValue = Union[str, int, float, Sequence[int], Sequence[str]]


def _i64(name: str, v: int) -> bytes:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidArgumentError(f"cache key field '{name}': {v!r} is not an int")
    if not -(2**63) <= v < 2**63:
        raise InvalidArgumentError(f"cache key field '{name}': {v} does not fit 64 bits")
    return struct.pack("<q", v)


def _text(name: str, v: str) -> bytes:
    if not isinstance(v, str):
        raise InvalidArgumentError(f"cache key field '{name}': {v!r} is not a str")
    b = v.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _encode_value(name: str, v: FieldValue) -> bytes:
    if isinstance(v, bool):
        raise InvalidArgumentError(f"cache key field '{name}': bool is not a key type")
    if isinstance(v, str):
        return bytes([_TEXT]) + _text(name, v)
    if isinstance(v, int):
        return bytes([_INT]) + _i64(name, v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise InvalidArgumentError(f"cache key field '{name}': floats must be finite")
        return bytes([_FLOAT]) + struct.pack("<d", 0.0 if v == 0.0 else v)
    if isinstance(v, (list, tuple)):
        is_ints = isinstance(v, ints) or (
            not isinstance(v, texts) and len(v) > 0 and not isinstance(v[0], str))
        if not is_ints and not isinstance(v, texts) and len(v) == 0:
            raise InvalidArgumentError(
                f"cache key field '{name}': an empty list needs ints([]) or texts([])")
        head = struct.pack("<Q", len(v))
        if is_ints:
            return bytes([_INT_LIST]) + head + b"".join(_i64(name, x) for x in v)
        return bytes([_TEXT_LIST]) + head + b"".join(_text(name, x) for x in v)
    raise InvalidArgumentError(
        f"cache key field '{name}': {type(v).__name__} is not a key type")


def make_key(kind: str, fields: Mapping[str, FieldValue]) -> str:
    """The key of `kind` over `fields` ("cache/<kind>/<64 hex digits>")."""
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise InvalidArgumentError(
            f"cache key kind {kind!r}: want 1..32 bytes of [a-z0-9_]")
    for name in fields:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidArgumentError(
                f"cache key field {name!r}: want 1..128 bytes of [a-z0-9_.]")
    out = [_MAGIC, struct.pack("<I", len(kind)), kind.encode(), struct.pack("<I", len(fields))]
    for name in sorted(fields):
        out.append(struct.pack("<I", len(name)) + name.encode())
        out.append(_encode_value(name, fields[name]))
    return f"cache/{kind}/{hashlib.sha256(b''.join(out)).hexdigest()}"


def _with(head: Mapping[str, FieldValue], rest: Mapping[str, FieldValue] | None,
          what: str) -> dict:
    rest = dict(rest or {})
    for name in head:
        if name in rest:
            raise InvalidArgumentError(f"{what}: '{name}' is a reserved field name")
    return {**head, **rest}


def condition_key(encoder: str, encoder_version: str, text: str,
                  params: Mapping[str, FieldValue] | None = None, scope: str = "") -> str:
    """A condition embedding's key: `text` encoded by `encoder` at
    `encoder_version` with the `params` that change its output. `scope`
    is who may find the entry: a tenant's name gives keys only that
    tenant's jobs compute (the field "scope"); empty: shared by every job."""
    if not encoder or not encoder_version:
        raise InvalidArgumentError(
            "condition key: the encoder id and version must not be empty")
    if not isinstance(scope, str):
        raise InvalidArgumentError("condition key: the scope must be a str")
    head = {"encoder": encoder, "encoder_version": encoder_version, "text": text}
    if "scope" in (params or {}):
        raise InvalidArgumentError("condition key: 'scope' is a reserved field name")
    if scope:
        head["scope"] = scope
    return make_key("cond", _with(head, params, "condition key"))


def checkpoint_key(*, model: str, model_version: str, sampler: str, seed: int,
                   guidance: float, condition_keys: Iterable[str], total_steps: int,
                   step: int, shape: Iterable[int], dtype: str) -> str:
    """A step checkpoint's key: the sampler state after `step` of
    `total_steps`."""
    if not (model and model_version and sampler and dtype):
        raise InvalidArgumentError(
            "checkpoint key: model, model_version, sampler and dtype must not be empty")
    if total_steps < 2 or not 1 <= step < total_steps:
        raise InvalidArgumentError(
            f"checkpoint key: step {step} must be in 1..{total_steps - 1}")
    return make_key("ckpt", {
        "model": model, "model_version": model_version, "sampler": sampler,
        "seed": seed, "guidance": float(guidance),
        "condition_keys": texts(condition_keys), "total_steps": total_steps,
        "step": step, "shape": ints(shape), "dtype": dtype})


def feature_key(namespace: str, parts: Mapping[str, FieldValue]) -> str:
    """A framework feature's key: `parts` under the framework's `namespace`."""
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise InvalidArgumentError(
            f"feature namespace {namespace!r}: want 1..64 bytes of [a-z0-9_.]")
    return make_key("feat", _with({"namespace": namespace}, parts, "feature key"))


# The request field naming whose entries a job's condition keys are.
CACHE_SCOPE_FIELD = "cache_scope"


@dataclasses.dataclass
class ConditionEncoder:
    """A text encoder as encode workers declare it (`StageWorker(...,
    condition_encoder=...)`): the orchestrator computes each job's condition
    keys from it (one per field of `text_fields`, read from the request
    JSON; an absent field is the empty text) and skips the encode stage of
    jobs whose keys are all cached."""

    id: str
    version: str
    params: Dict[str, FieldValue] = dataclasses.field(default_factory=dict)
    text_fields: List[str] = dataclasses.field(default_factory=lambda: ["prompt"])

    def keys_for(self, request_json: str) -> List[str]:
        """The condition keys of a request, in `text_fields` order, under the
        request's `cache_scope` (set by the orchestrator: the submitting
        tenant, or none when the deployment shares entries)."""
        request = json.loads(request_json)
        if not isinstance(request, dict):
            raise InvalidArgumentError("condition keys: the request is not a JSON object")
        scope = request.get(CACHE_SCOPE_FIELD, "")
        if not isinstance(scope, str):
            raise InvalidArgumentError(
                f"condition keys: request field '{CACHE_SCOPE_FIELD}' is not a string")
        out = []
        for field in self.text_fields:
            text = request.get(field, "")
            if not isinstance(text, str):
                raise InvalidArgumentError(
                    f"condition keys: request field '{field}' is not a string")
            out.append(condition_key(self.id, self.version, text, self.params, scope))
        return out

    def _declaration(self):
        for v in self.params.values():  # Each must be a key type (and JSON keeps it).
            if isinstance(v, (ints, texts)) and not v:
                raise InvalidArgumentError("encoder params: lists must not be empty")
        condition_key(self.id, self.version, "", self.params)
        return (self.id, self.version, json.dumps(self.params), list(self.text_fields))


_CACHED_INPUT = b"sluice-cached-input-v1\n"


def cached_input(keys: Sequence[str]) -> bytes:
    """A stage output naming cache entries (the next stage reads them from
    the store) instead of carrying a payload: what an encode handler with a
    cache returns, and what the orchestrator hands on when it skips it."""
    if not keys or any(not k or "\n" in k for k in keys):
        raise InvalidArgumentError("cached input: want one or more keys without newlines")
    return _CACHED_INPUT + b"".join(k.encode() + b"\n" for k in keys)


def cached_input_keys(data: bytes) -> List[str]:
    """The keys a cached input names. Raises InvalidArgumentError for
    anything else (e.g. a payload descriptor)."""
    if not is_cached_input(data):
        raise InvalidArgumentError("input: not a cached input")
    keys = bytes(data[len(_CACHED_INPUT):]).decode().split("\n")
    if keys and keys[-1] == "":
        keys.pop()
    if not keys or any(not k for k in keys):
        raise InvalidArgumentError("input: a cached input must name keys, none empty")
    return keys


def is_cached_input(data: bytes) -> bool:
    """Whether `data` is a cached_input() reference rather than a payload."""
    return bytes(data[:len(_CACHED_INPUT)]) == _CACHED_INPUT


class Cache:
    """Values under standard keys on a `sluice.Store`, with the `cache` (LRU)
    or `soft_pin` lease; entries are read by any number of jobs and never
    removed by a job's cleanup.

    `get_or_compute(key, compute)` is single-flight across the cluster: of
    concurrent misses for one key, one calls `compute()` (returning a
    bytes-like value) while the others wait for its value; a computer that
    dies holds the others back for at most `claim_ttl` seconds. Exceptions
    raised by `compute` reach its caller unchanged.
    """

    @translated
    def __init__(self, store, name: str = "condition", lease: str = "cache",
                 claim_ttl: float = 10.0, wait_timeout: float = 60.0):
        self._core = _sluice.Cache(store._core, name, lease, claim_ttl, wait_timeout)

    @translated
    def get_or_compute(self, key: str, compute) -> bytes:
        """The bytes cached under `key`, or else compute()'s value, stored
        under it and returned (single-flight: see the class)."""
        return self._core.get_or_compute(key, compute)

    @translated
    def lookup(self, key: str):
        """The value under `key`, or None."""
        return self._core.lookup(key)

    @translated
    def insert(self, key: str, value: bytes) -> None:
        """Stores `value` under `key`; an existing value is kept."""
        self._core.insert(key, value)

    def stats(self) -> dict:
        """lookups, hits, misses, computes, single_flight_waits, takeovers,
        bytes_inserted since this cache was made."""
        return self._core.stats()


__all__ = ["Cache", "ConditionEncoder", "cached_input", "cached_input_keys", "is_cached_input",
           "make_key", "condition_key", "checkpoint_key", "feature_key", "ints", "texts"]
