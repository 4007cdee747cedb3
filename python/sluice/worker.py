"""StageWorker: serve one stage of a model's pipeline for the orchestrator
with a Python handler.

    def denoise(ctx):
        latent = ...                       # consume ctx.input with a DiffusionConnector
        for step in range(ctx.resume_step, steps):
            if ctx.should_stop():
                raise sluice.CancelledError("stopped")
            ...
            ctx.progress(step + 1, steps)
        return StageOutput(output=handle.descriptor(), payload_keys=[...])

    conn.warm()  # Opens the store's connections now, not on the first job.
    worker = StageWorker("denoise", orchestrator="127.0.0.1:7200", handler=denoise)

A worker serves the models it names (model="wan2.1-480p", or a list; none:
the orchestrator's default model), and jobs of a model run only on its
workers. A model's pipeline is declared by its workers as stage names in
order, ":admission" marking admission stages (pinned, stateful,
preemptible, holding a slot in the next stage) and "@N" a stage's weight
in a job's progress (1..1000; default 8 for admission stages, 1 for
others), e.g.

    StageWorker("upscale", orchestrator, handler=upscale, model="my-sr",
                pipeline="encode,denoise:admission,decode,upscale")

The default pipeline is "encode,denoise:admission,decode". ctx.model says
which of the worker's models a job is for.

A handler that stores checkpoints reports each with
ctx.progress(step, steps, checkpointed=True) and removes an older one only
when its step is below ctx.reported_checkpoint (the newest checkpointed step
the orchestrator has answered a heartbeat about): a lost job resumes from
the newest checkpoint the orchestrator heard of, not the newest written.

A request may ask for previews ("preview_every": k in its request_json): a
denoise handler then calls ctx.preview(step, png) every k steps with a small
PNG of its current prediction (at most 64 KiB; the newest unsent one goes
with the next heartbeat) and clients see it as a `preview` event and at
GET /v1/jobs/{id}/preview.

ctx.add_timing(phase, seconds) says where the handler's time went ("input",
"output": 1..32 of [a-z_], added up per phase); with the worker's own
"start" and "run" it shows on the job's stage_done event (timings_ms) and in
`sluice bench e2e`'s stage breakdown. A bad phase or a negative or
non-finite time raises InvalidArgumentError.

ctx.add_count(name, n) adds n (>= 0) to what the run counted under `name`
(1..32 of [a-z_], at most 8 names; e.g. "steps_skipped" by a step cache); it
shows on the job's stage_done event (counts). A bad name or a negative n
raises InvalidArgumentError.

ctx.set_held(labels) says what the worker holds after the run that later
jobs may prefer it for, newest first: ADAPTER_LABEL_PREFIX + digest for
each LoRA adapter resident (at most 16 labels of 1..128 bytes; more, or an
empty or longer one, raise InvalidArgumentError). It replaces what the
orchestrator learned of the worker, so jobs stop being drawn to an
adapter it dropped.

ctx.interactive is True for a job of the interactive class (a person waits
on it): a handler may trade throughput for its latency, e.g. step it
outside a StepBatcher's batch.

The handler runs on a sluice thread (holding the GIL while it runs Python),
up to `capacity` at once. Returning bytes is shorthand for
StageOutput(output=bytes). Raising fails the assignment; UnavailableError and
ResourceExhaustedError are retried elsewhere, other errors fail the job.
"""

import dataclasses
from typing import Callable, List, Optional, Sequence, Union

from . import _sluice, cache
from ._security import security_files
from .errors import InvalidArgumentError, translated

# A handler's context raises typed errors, as the rest of the package does.
_sluice.StageContext.add_timing = translated(_sluice.StageContext.add_timing)
_sluice.StageContext.add_count = translated(_sluice.StageContext.add_count)
_sluice.StageContext.set_held = translated(_sluice.StageContext.set_held)

# A held label naming a LoRA adapter: this prefix and the adapter's digest.
ADAPTER_LABEL_PREFIX = _sluice.ADAPTER_LABEL_PREFIX



@dataclasses.dataclass
class StageOutput:
    """What a handler returns: `output` (the descriptor for the next stage,
    or the final stage's result), `content_type` (final stage: a MIME type
    such as "image/png"), `payload_keys` (store objects the job owns, removed
    with it) and `preempted` (the handler yielded after
    ctx.should_checkpoint())."""

    output: bytes = b""  # Descriptor for the next stage, or the final result.
    content_type: str = ""  # Final stage: MIME type, e.g. "image/png".
    payload_keys: List[str] = dataclasses.field(default_factory=list)
    preempted: bool = False  # Yielded after ctx.should_checkpoint().


class StageWorker:
    """One worker of one stage: registers with the orchestrator, takes
    assignments and runs `handler(ctx)` for each (module docstring above:
    the context, pipelines, checkpoints, previews, errors)."""

    @translated
    def __init__(self, stage: str, orchestrator: str,
                 handler: Callable[..., Union[bytes, StageOutput]], capacity: int = 1,
                 labels: Optional[List[str]] = None, name: str = "",
                 heartbeat: float = 0.2, model: Union[str, List[str], None] = None,
                 pipeline: str = "", cluster_token_file: Optional[str] = None,
                 tls_cert_file: Optional[str] = None, tls_key_file: Optional[str] = None,
                 tls_ca_file: Optional[str] = None, assignment_timeout: float = 0.0,
                 condition_encoder: Optional["cache.ConditionEncoder"] = None,
                 caches: Sequence["cache.Cache"] = (),
                 role_credential_file: Optional[str] = None,
                 image_size: str = "", video_size: str = "", takes_picture: bool = False):
        """Registers with the orchestrator and serves `handler`.

        `assignment_timeout` (seconds): an assignment with no progress
        (ctx.progress, ctx.keep_alive) this long goes to another worker; set
        it from the model's pace. 0: the orchestrator's --assignment-timeout-ms.

        The cluster credential and TLS files are those of `sluice worker
        --cluster-token/--tls-*`; unset ones come from SLUICE_CLUSTER_TOKEN_FILE
        and SLUICE_TLS_{CERT,KEY,CA}_FILE. `role_credential_file` (a "worker"
        credential from `sluice token derive`, or SLUICE_ROLE_CREDENTIAL_FILE)
        stands in for the token.

        `condition_encoder` (encode workers whose handler caches each
        text's embedding under `cache.condition_key` and returns
        `cache.cached_input(keys)`): declared at registration, so the
        orchestrator skips this stage for jobs whose conditions are all
        cached. `caches`: `cache.Cache` objects whose counters go to the
        orchestrator's /metrics with each heartbeat.

        `image_size` / `video_size` ("WIDTHxHEIGHT", each 64..2048 and a
        multiple of 8): the sizes its models were trained at; requests for
        its models without a `size` get them. Empty: the front's defaults.

        `takes_picture`: its models read a request's picture (an edit's
        image, a video's input_reference, in ctx.request_json); requests
        with one for a model none of whose workers says so are refused
        (400)."""
        if not callable(handler):
            raise InvalidArgumentError("handler must be callable")
        models = [model] if isinstance(model, str) else list(model or [])
        if not all(isinstance(m, str) for m in models):
            raise InvalidArgumentError("model must be a string or a list of strings")
        if not isinstance(pipeline, str):
            raise InvalidArgumentError("pipeline must be a string like 'encode,denoise:admission'")
        for field, value in (("image_size", image_size), ("video_size", video_size)):
            if not isinstance(value, str):
                raise InvalidArgumentError(f"{field} must be a string like '128x128'")
        if not isinstance(takes_picture, bool):
            raise InvalidArgumentError("takes_picture must be True or False")

        def call(ctx):
            out = handler(ctx)
            if isinstance(out, (bytes, bytearray, memoryview)):
                out = StageOutput(output=bytes(out))
            if not isinstance(out, StageOutput):
                raise InvalidArgumentError("handler must return bytes or a StageOutput")
            return (bytes(out.output), out.content_type, list(out.payload_keys),
                    bool(out.preempted))

        self._core = _sluice.Worker(orchestrator, stage, call, int(capacity), list(labels or []),
                                    name, float(heartbeat), models, pipeline,
                                    security_files(cluster_token_file, tls_cert_file,
                                                   tls_key_file, tls_ca_file, role_credential_file),
                                    float(assignment_timeout),
                                    None if condition_encoder is None
                                    else condition_encoder._declaration(),
                                    [c._core for c in caches], image_size, video_size,
                                    takes_picture)

    @property
    def completed(self) -> int:
        """Jobs this worker has finished (succeeded or failed) so far."""
        return self._core.completed

    def wait_registered(self, timeout: float = 10.0) -> bool:
        """True once the orchestrator has accepted this worker; False after
        `timeout` seconds (it keeps retrying, logging each failure)."""
        return self._core.wait_registered(float(timeout))

    @translated
    def drain(self, timeout: float = 30.0) -> None:
        """Stop taking work; hand back what does not finish within `timeout`."""
        self._core.drain(float(timeout))

    def close(self) -> None:
        """Drains (as drain() with its default timeout), then stops; the
        worker leaves its pool. Idempotent."""
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
