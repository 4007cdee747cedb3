"""sluice.StepBatcher: the steps of concurrent members of one key run as one
batch; keys never mix; a member that leaves is not waited for; errors reach
every step of their batch; bad arguments are refused by name."""

import threading
import time

import pytest

import sluice


def run_members(batcher, steps_per_member, key_of=lambda m: "k"):
    """One thread per member, each stepping (member, step) through the
    batcher; returns {member: [(result, batch size), ...]}."""
    got = {m: [] for m in range(len(steps_per_member))}
    errors = []
    joined = threading.Barrier(len(steps_per_member))  # Every member joins before a step.

    def member(m):
        try:
            with batcher.member(key_of(m)):
                joined.wait(30)
                for s in range(steps_per_member[m]):
                    got[m].append(batcher.step(key_of(m), (m, s)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=member, args=(m,)) for m in range(len(steps_per_member))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a member is stuck"
    assert not errors, errors
    return got


def test_members_steps_run_together_and_each_gets_its_own_result():
    batches = []

    def run(items):
        batches.append(sorted(items))
        return [(m * 100 + s) for m, s in items]

    # A long window: a batch waits for every member's step, not the clock.
    b = sluice.StepBatcher(run, max_batch=4, gather=5.0)
    got = run_members(b, [5, 5, 5])
    for m in range(3):
        assert got[m] == [(m * 100 + s, 3) for s in range(5)]
    assert batches == [[(0, s), (1, s), (2, s)] for s in range(5)]
    assert b.stats == {"batches": 5, "steps": 15, "largest": 3}


def test_a_member_that_leaves_is_not_waited_for():
    sizes = []

    def run(items):
        sizes.append(len(items))
        return [None] * len(items)

    b = sluice.StepBatcher(run, max_batch=4, gather=5.0)
    t0 = time.monotonic()
    got = run_members(b, [2, 5])
    # Two steps together, then three alone at once: waiting 5 s for the
    # member that left would take 15 s.
    assert time.monotonic() - t0 < 4.0
    assert sizes == [2, 2, 1, 1, 1]
    assert [n for _, n in got[1]] == [2, 2, 1, 1, 1]


def test_keys_never_share_a_batch_and_max_batch_caps_it():
    batches = []

    def run(items):
        batches.append([m for m, _ in items])
        return [None] * len(items)

    b = sluice.StepBatcher(run, max_batch=2, gather=0.2)
    run_members(b, [3, 3, 3, 3], key_of=lambda m: ("even", "odd")[m % 2])
    for members in batches:
        assert len(members) <= 2
        assert len({m % 2 for m in members}) == 1, batches
    assert sum(len(x) for x in batches) == 12


def test_what_run_raises_reaches_every_step_of_its_batch_and_the_next_batch_runs():
    calls = []

    def run(items):
        calls.append(len(items))
        if len(calls) == 1:
            raise sluice.ResourceExhaustedError("out of device memory")
        return [m for m, _ in items]

    b = sluice.StepBatcher(run, max_batch=4, gather=5.0)
    raised, seconds = [], []
    joined = threading.Barrier(2)

    def member(m):
        with b.member("k"):
            joined.wait(30)
            try:
                b.step("k", (m, 0))
            except sluice.ResourceExhaustedError as e:
                raised.append(str(e))
            seconds.append(b.step("k", (m, 1)))

    threads = [threading.Thread(target=member, args=(m,)) for m in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert raised == ["out of device memory"] * 2
    assert sorted(seconds) == [(0, 2), (1, 2)]
    assert calls == [2, 2]

    wrong = sluice.StepBatcher(lambda items: [], max_batch=2)
    with pytest.raises(sluice.InternalError, match="0 results for a batch of 1"):
        wrong.step("k", 1)


def test_bad_arguments_are_refused_by_name():
    ok = lambda items: items  # noqa: E731
    for kwargs, name in [({"run": None}, "run"), ({"run": ok, "max_batch": 0}, "max_batch"),
                         ({"run": ok, "max_batch": 65}, "max_batch"),
                         ({"run": ok, "max_batch": "4"}, "max_batch"),
                         ({"run": ok, "gather": -1}, "gather"),
                         ({"run": ok, "gather": 11}, "gather")]:
        with pytest.raises(sluice.InvalidArgumentError, match=name):
            sluice.StepBatcher(**kwargs)
    b = sluice.StepBatcher(ok)
    with pytest.raises(sluice.InvalidArgumentError, match="hashable"):
        b.step([1, 2], 0)
    with pytest.raises(sluice.InvalidArgumentError, match="hashable"):
        with b.member({}):
            pass
    # A step outside a membership runs alone at once.
    assert b.step(("shape", 1), "x") == ("x", 1)
