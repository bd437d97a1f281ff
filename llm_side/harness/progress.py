"""The run's progress bar: episodes done, success so far, the current episode's step, ETA (tqdm).

A step of an LLM agent can take tens of seconds on a CPU, so the bar moves per episode but its text
also shows the step of the episode under way ("step 7/50")."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


class Progress:
    """A tqdm bar over all of a run's episodes; resumed ones count as already done."""

    def __init__(self, total: int, done: int, successes: int, *, enabled: bool = True, desc: str = ""):
        self.successes = successes
        self.done = done
        self.step_text = ""
        self._bar = tqdm(
            total=total,
            initial=done,
            desc=desc,
            unit="ep",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )
        self._refresh()

    def _refresh(self) -> None:
        rate = self.successes / self.done if self.done else 0.0
        text = f"success {self.successes}/{self.done} ({rate:.0%})"
        self._bar.set_postfix_str(text + (f", {self.step_text}" if self.step_text else ""))

    def step(self, t: int, max_steps: int) -> None:
        """Step t (1-based) of the episode under way is done."""
        self.step_text = f"step {t}/{max_steps}"
        self._refresh()

    def update(self, success: bool) -> None:
        self.step_text = ""
        self.done += 1
        self.successes += int(success)
        self._refresh()
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
