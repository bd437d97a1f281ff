"""The one acting-and-training loop of pre-training and adaptation, in the manner of DreamerV3's
`embodied/run/train.py`: step every env once, then run the registered callbacks in the order they
were registered, each behind its clock (there: `driver.on_step(...)`, `should_train`, `should_log`,
`should_save`).

Why one loop: pre-training and adaptation differ in what they do after an env step (which replay an
episode goes to, when the train ratio starts, when they log and save), not in how the steps
follow one another. Each run builds its callbacks and clocks; the loop only keeps the order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from muse_common.interrupts import raise_if_lost
from muse_jax.loops.collect import Collector, Episode

__all__ = ["Every", "RunLoop", "Tick"]


class Every:
    """True once `every` env steps have passed since it last fired (embodied's `LocalClock`), and at every
    step from `until` on (the last step of a run is always logged). `last` is where the run starts."""

    def __init__(self, every: int, last: int, until: int | None = None) -> None:
        self.every, self.last, self.until = every, last, until

    def __call__(self, tick: Tick) -> bool:
        step = tick.env_step
        if step - self.last >= self.every or (self.until is not None and step >= self.until):
            self.last = step
            return True
        return False


@dataclasses.dataclass
class Tick:
    """What one loop step did: the env-step counter after it, the episodes it finished, the env faults
    it hit (the collector rebuilt its envs for each; their unfinished episodes were dropped)."""

    env_step: int
    episodes: list[Episode]
    faults: list[dict[str, Any]]


class RunLoop:
    """Collect one step in every env of `collector`, then the registered callbacks, until `done`.

    `act(env_step) -> (learner state, policy mode)` gives the policy its weights and mode for the next
    step; `env_step` is the counter the run resumes from, advanced by `steps_per_tick` per step (the
    number of envs in pre-training; one per task in adaptation, which counts each task's own steps).

    `overlap` (pre-training's `train.overlap_collect`, adaptation's `adapt.overlap_collect`): right after each
    env step, `act` is asked for the next step's weights and the policy is dispatched at once
    (`Collector.prefetch`), before the callbacks dispatch this tick's train steps, so the next tick's actions
    do not wait for them and the envs step while they run. The policy acting at tick k then has the weights
    after the callbacks of ticks 0..k-2 (without overlap: 0..k-1); the first tick of the loop asks `act` at
    its start, as without overlap."""

    def __init__(self, collector: Collector, act: Callable[[int], tuple[Any, str]], env_step: int,
                 steps_per_tick: int, overlap: bool = False) -> None:
        self.collector, self.act, self.overlap = collector, act, overlap
        self.env_step, self.steps_per_tick = env_step, steps_per_tick
        self._callbacks: list[tuple[Callable[[Tick], Any] | None, Callable[[Tick], Any]]] = []
        self._marks: dict[str, int] = {}
        self._stopped = False

    def on_step(self, fn: Callable[[Tick], Any], clock: Callable[[Tick], Any] | None = None) -> None:
        """Call `fn(tick)` after every env step on which `clock(tick)` is true (always without a clock)."""
        self._callbacks.append((clock, fn))

    def mark(self, name: str) -> None:
        """Name the point after the callbacks registered so far. `run` ignores marks; a lockstep runner of
        several loops (loops/seeds.py) runs every loop's callbacks up to a mark, then work shared by all
        of them (one vmapped train step for every seed), then every loop's callbacks after the mark."""
        self._marks[name] = len(self._callbacks)

    @property
    def stopped(self) -> bool:
        """True once a callback called `stop`."""
        return self._stopped

    def stop(self) -> None:
        """End `run` after the current step's callbacks (a callback's way to stop the run early)."""
        self._stopped = True

    def run(self, done: Callable[[int], bool]) -> bool:
        """Loop until `done(env_step)`; False when a callback called `stop` first."""
        while not done(self.env_step):
            self.dispatch(self.collect())
            if self._stopped:
                return False
        return True

    def collect(self) -> Tick:
        """Step every env once and advance the counter: the tick the callbacks are then given. First, a
        Ctrl-C that Python swallowed since the last tick (muse_common/interrupts.py) stops the run here."""
        raise_if_lost()
        n_faults = len(self.collector.faults)
        if self.overlap and self.collector.prefetched:
            episodes = self.collector.step()
        else:
            episodes = self.collector.step(*self.act(self.env_step))
        self.env_step += self.steps_per_tick
        if self.overlap:  # the next step's policy, before this tick's train steps (see the class docstring)
            self.collector.prefetch(*self.act(self.env_step))
        return Tick(self.env_step, episodes, self.collector.faults[n_faults:])

    def dispatch(self, tick: Tick, after: str | None = None, until: str | None = None) -> None:
        """Run the callbacks (those between the marks `after` and `until` when given) whose clocks fire."""
        lo = self._marks[after] if after is not None else 0
        hi = self._marks[until] if until is not None else len(self._callbacks)
        for clock, fn in self._callbacks[lo:hi]:
            if clock is None or clock(tick):
                fn(tick)
