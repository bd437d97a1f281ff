"""A Ctrl-C that Python swallows (raised inside a gc callback or a finalizer) still stops a run."""

from __future__ import annotations

import gc
import os
import signal
import time

import pytest

from muse_common.interrupts import raise_if_lost, recording_interrupts


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler, as a program started in the foreground has it."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1.0)  # the handler runs at the next bytecode; this sleep is cut short by it


def test_a_ctrl_c_swallowed_in_a_gc_callback_is_raised_at_the_next_safe_point(default_sigint) -> None:
    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            gc.callbacks.remove(callback)
            _ctrl_c()  # its KeyboardInterrupt is printed and dropped by the collector, as jax's callback's was

    with recording_interrupts():
        gc.callbacks.append(callback)
        gc.collect()  # no exception comes out of here
        with pytest.raises(KeyboardInterrupt):
            raise_if_lost()
        raise_if_lost()  # once per Ctrl-C
    assert callback not in gc.callbacks


def test_a_ctrl_c_that_stops_the_program_raises_as_before_and_is_not_raised_twice(default_sigint) -> None:
    with pytest.raises(KeyboardInterrupt):
        with recording_interrupts():
            _ctrl_c()
    raise_if_lost()  # leaving the block forgets it
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nothing_changes_where_sigint_is_not_pythons_default() -> None:
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job started in the background of a shell
    try:
        with recording_interrupts():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            _ctrl_c()  # ignored: no KeyboardInterrupt, nothing recorded
            raise_if_lost()
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_run_loop_stops_at_its_next_tick_after_a_swallowed_ctrl_c(default_sigint) -> None:
    from muse_jax.loops.run_loop import RunLoop

    class Collector:
        faults: list = []
        steps = 0

        def step(self, state, mode):
            self.steps += 1
            if self.steps == 2:
                try:
                    _ctrl_c()
                except KeyboardInterrupt:
                    pass  # swallowed where it landed
            return []

    col = Collector()
    loop = RunLoop(col, lambda _: (None, "dreamer"), env_step=0, steps_per_tick=1)
    with recording_interrupts(), pytest.raises(KeyboardInterrupt):
        loop.run(done=lambda step: step >= 10)
    assert col.steps == 2  # stopped before the third env step
