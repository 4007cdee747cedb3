"""StepBatcher: step-level continuous batching for a Python stage worker.

A denoise StageWorker with capacity K runs up to K handlers at once, each
on its own thread with its own ctx: a job's progress, checkpoints,
previews, cancellation and lease stay its own. Each handler hands every
step of its sampler loop to one StepBatcher shared by the worker; the
steps of one key (jobs that can share a forward: the same latent shape)
that arrive within the gather window run as one call of `run`, and each
handler gets its own result back:

    batcher = sluice.StepBatcher(run=forward_many, max_batch=4)

    def denoise(ctx):
        ...
        batched = 0
        with batcher.member(shape):          # from the first step to the last
            for i in range(start, steps):
                if ctx.should_stop():
                    raise sluice.CancelledError("stopped")
                out, n = batcher.step(shape, item)
                batched += n > 1
                ...
                ctx.progress(i + 1, steps)
        ctx.add_count("steps_batched", batched)

    worker = sluice.StageWorker("denoise", orch, handler=denoise, capacity=4)

`run(items)` takes the items of one batch (1..max_batch of them, in the
order they arrived) and returns a sequence of as many results, in that
order; it runs on the thread of the batch's first step, without the
batcher's lock. While a job is a member of its key, a batch of that key
waits (up to the gather window) for the job's next step before running
without it, so jobs join and leave the running batch at step boundaries:
a new job waits at most one step. What `run` raises is raised by the
step() of every item in that batch; a result list of the wrong length
raises InternalError there.
"""

import contextlib
import threading
from typing import Any, Callable, Hashable, Iterator, List, Sequence, Tuple

from .errors import InternalError, InvalidArgumentError


class _Pending:
    __slots__ = ("item", "done", "batch", "result", "error")

    def __init__(self, item):
        self.item = item
        self.done = False
        self.batch = 0
        self.result = None
        self.error = None


class _Group:
    """One key's members and the steps waiting for its next batch."""

    __slots__ = ("members", "waiting", "leading")

    def __init__(self):
        self.members = 0
        self.waiting: List[_Pending] = []
        self.leading = False  # A step of this key is gathering or running a batch.


class StepBatcher:
    """Runs the steps of concurrent jobs of one key as one batch. Each job's
    handler (on its own thread: StageWorker capacity K) enters member(key)
    around its sampler loop and hands each step to step(key, item); `run`
    gets the items of the steps that met and returns their results. The
    module `sluice.batching` shows a handler's loop. Thread-safe."""

    def __init__(self, run: Callable[[List[Any]], Sequence[Any]], max_batch: int = 8,
                 gather: float = 0.005):
        """`run`: the batch's forward (items -> one result each); `max_batch`
        (1..64): the most steps in one batch; `gather` (seconds, 0..10): how
        long a batch's first step waits for the other members' (those
        between steps: saving a checkpoint, making a preview)."""
        if not callable(run):
            raise InvalidArgumentError("run must be callable (a list of items -> their results)")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or \
                not 1 <= max_batch <= 64:
            raise InvalidArgumentError(f"max_batch must be an int in 1..64, not {max_batch!r}")
        if isinstance(gather, bool) or not isinstance(gather, (int, float)) or \
                not 0 <= gather <= 10:
            raise InvalidArgumentError(f"gather must be seconds in 0..10, not {gather!r}")
        self._run = run
        self._max = max_batch
        self._gather = float(gather)
        self._cv = threading.Condition()
        self._groups = {}
        self._batches = 0
        self._steps = 0
        self._largest = 0

    @staticmethod
    def _checked(key: Hashable) -> Hashable:
        try:
            hash(key)
        except TypeError as e:
            raise InvalidArgumentError(f"a batch key must be hashable (a tuple, say): {e}") from e
        return key

    @contextlib.contextmanager
    def member(self, key: Hashable) -> Iterator[None]:
        """A job's membership of `key`'s batches, for its sampler loop."""
        self._checked(key)
        with self._cv:
            self._groups.setdefault(key, _Group()).members += 1
        try:
            yield
        finally:
            with self._cv:
                g = self._groups[key]
                g.members -= 1
                self._drop_if_idle(key, g)
                self._cv.notify_all()  # A gathering step may now have every member's.

    def _drop_if_idle(self, key: Hashable, g: _Group) -> None:
        if g.members == 0 and not g.waiting and not g.leading:
            del self._groups[key]

    def step(self, key: Hashable, item: Any) -> Tuple[Any, int]:
        """Runs `item` in a batch with the steps other members of `key` hand
        in within the gather window; returns (its result, the number of
        steps in that batch: 1 when it ran alone). A step outside a
        membership runs too (it waits for no one)."""
        self._checked(key)
        p = _Pending(item)
        with self._cv:
            g = self._groups.setdefault(key, _Group())
            g.waiting.append(p)
            self._cv.notify_all()
            while not p.done:
                if g.leading:
                    self._cv.wait_for(lambda: p.done or not g.leading)
                    continue
                # This step leads its key's batch: it waits for every
                # member's step (or the window's end, or a full batch).
                g.leading = True
                self._cv.wait_for(
                    lambda: len(g.waiting) >= min(max(g.members, 1), self._max),
                    timeout=self._gather)
                taken = g.waiting[:self._max]
                del g.waiting[:self._max]
                self._cv.release()
                results, error = None, None
                try:
                    results = list(self._run([t.item for t in taken]))
                    if len(results) != len(taken):
                        raise InternalError(f"run returned {len(results)} results for a batch "
                                            f"of {len(taken)} steps")
                except BaseException as e:  # Every member of the batch sees it.
                    error = e
                finally:
                    self._cv.acquire()
                for i, t in enumerate(taken):
                    t.done = True
                    t.batch = len(taken)
                    t.error = error
                    t.result = None if error is not None else results[i]
                self._batches += 1
                self._steps += len(taken)
                self._largest = max(self._largest, len(taken))
                g.leading = False
                self._drop_if_idle(key, g)
                self._cv.notify_all()
        if p.error is not None:
            raise p.error
        return p.result, p.batch

    @property
    def stats(self) -> dict:
        """{"batches", "steps", "largest"}: batches run, steps in them, the
        most steps in one."""
        with self._cv:
            return {"batches": self._batches, "steps": self._steps, "largest": self._largest}
