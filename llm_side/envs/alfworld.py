"""ALFWorld (Shridhar et al. 2020) text games behind the `TextEnv` contract.

Each task id names one game folder (see `alfworld_data`). A game is loaded with TextWorld's PDDL
backend and the stock `AlfredDemangler` wrapper, as `AlfredTWEnv` does, but one game at a time and
without gym's worker processes; loaded games are cached so a task's later episodes reset fast.
Episodes last 50 steps. A `think: ...` action answers 'OK.' without touching the game, and an empty
(invalid) action answers 'Nothing happens.' as the game does for any command it does not know.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llm_side.envs import alfworld_data as awd
from llm_side.harness.contracts import EnvCrashed, Observation, StepResult
from muse_common.settings import Allowed, build_options, integer_at_least, setting

THINK_REPLY = "OK."
NOTHING = "Nothing happens."
TASK_MARKER = "Your task is to: "

INSTRUCTIONS = """\
Actions: look | inventory | go to [receptacle] | open [receptacle] | close [receptacle] |
take [object] from [receptacle] | put [object] in/on [receptacle] | use [lamp] | examine [thing] |
heat [object] with [microwave] | cool [object] with [fridge] | clean [object] with [sinkbasin] |
think: [your reasoning]. Refer to things by name and number, e.g. 'take apple 1 from diningtable 1'."""


_ARRIVE_RE = re.compile(r"^You arrive at loc \d+\. ")


def clean_observation(text: str) -> str:
    """Drop TextWorld's welcome banner (everything before the first blank line), as ReAct does, and
    the 'You arrive at loc N.' prefix, which the ReAct few-shot examples do not have."""
    text = text or ""
    if text.lstrip().startswith("-="):
        text = "\n".join(text.split("\n\n")[1:])
    return _ARRIVE_RE.sub("", text.strip())


def task_text(observation: str) -> str:
    """'put a clean mug in coffeemachine' from the first observation's 'Your task is to: ...' line."""
    for line in observation.splitlines():
        if TASK_MARKER in line:
            return line.split(TASK_MARKER, 1)[1].strip().rstrip(".")
    return ""


def _load_game(gamefile: Path, expert: bool = False) -> Any:
    """A TextWorld env for one ALFWorld game (demangled names, won + admissible commands; with
    `expert`, also ALFWorld's hand-coded expert plan)."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredExpertType

    extras = ["gamefile", "expert_plan"] if expert else ["gamefile"]
    wrappers = [AlfredDemangler()] + ([AlfredExpert(AlfredExpertType.HANDCODED)] if expert else [])
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=extras)
    with contextlib.redirect_stdout(io.StringIO()):
        return textworld.start(str(gamefile), request_infos=infos, wrappers=wrappers)


class AlfworldEnv:
    """One ALFWorld game at a time; `task_ids(split)` lists the 140 / 134 / 200 games."""

    name = "alfworld"
    default_max_steps = 50

    def __init__(self, data: str | Path | None = None, split: str | None = None, cache_games: int = 4,
                 max_steps: int = 50, expert: bool = False, shots: int = 2):
        if shots not in (0, 1, 2):
            raise ValueError(f"alfworld shots must be 0, 1 or 2 (few-shot examples per prompt), got {shots}.")
        self.expert = bool(expert)
        self.shots = shots
        self.data_root = awd.data_root(data)
        self._data = str(self.data_root)
        self.split = split
        self.default_max_steps = int(max_steps)
        self._cache: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._cache_size = max(1, int(cache_games))
        self._env: Any = None
        self._state: Any = None
        self._task_id: str | None = None
        self._admissible: list[str] | None = None
        self._steps = 0
        self._done = False

    # -- listing and prompt material ---------------------------------------------------------------
    def task_ids(self, split: str | None = None) -> list[str]:
        return awd.task_ids(split or self.split, self._data)

    def expand_task_ids(self, specs: list[str]) -> list[str]:
        """The ids `--tasks` names, checked against every split: an id names its split's folder
        ('valid_seen/...'), so a game of any split is played without also setting the env's default split.
        Unknown ids raise one ValueError naming them and how to list the known ones."""
        known = {t for folder in awd.SPLITS.values() for t in awd.task_ids(folder, self._data)}
        unknown = [t for t in specs if t not in known]
        if unknown:
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            shown = ", ".join(repr(t) for t in unknown[:3]) + more
            raise ValueError(f"unknown ALFWorld task id(s) {shown}: an id is a game folder such as "
                             f"'valid_seen/TASK/trial_...'; list them with `muse-llm tasks --env alfworld --split "
                             f"{'|'.join(awd.SPLITS)}`")
        return list(specs)

    def react_examples(self, task_id: str) -> str:
        """The task type's ReAct examples ('' with shots=0: agents then use `instructions()`)."""
        return awd.react_examples(task_id, self.shots)

    def react_intro(self) -> str:
        """The original ReAct ALFWorld prompt's first line."""
        return "Interact with a household to solve a task. Here are two examples.\n"

    def reflexion_examples(self) -> str:
        return awd.reflexion_examples() if self.shots else ""

    def instructions(self) -> str:
        return INSTRUCTIONS

    # -- episodes ----------------------------------------------------------------------------------
    def _game(self, task_id: str) -> Any:
        if task_id in self._cache:
            self._cache.move_to_end(task_id)
            return self._cache[task_id]
        gamefile = awd.game_file(task_id, self._data)
        try:
            env = _load_game(gamefile, self.expert)
        except Exception as exc:  # noqa: BLE001 - any loader failure is this game's crash
            raise EnvCrashed(f"ALFWorld game {task_id} failed to load: {type(exc).__name__}: {exc}") from exc
        self._cache[task_id] = env
        while len(self._cache) > self._cache_size:
            _, old = self._cache.popitem(last=False)
            _close(old)
        return env

    def reset(self, task_id: str, seed: int = 0) -> Observation:
        """Start `task_id` (seed unused: ALFWorld games are deterministic)."""
        env = self._game(task_id)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                state = env.reset()
        except Exception as exc:  # noqa: BLE001
            self._cache.pop(task_id, None)
            raise EnvCrashed(f"ALFWorld game {task_id} failed to reset: {type(exc).__name__}: {exc}") from exc
        self._env, self._task_id, self._steps, self._done = env, task_id, 0, False
        text = clean_observation(state.feedback)
        self._admissible = list(state.get("admissible_commands") or []) or None
        self._state = state
        return Observation(text=text, task=task_text(text), admissible_actions=self._admissible,
                           info={"task_type": awd.react_family(task_id)})

    def step(self, action: str) -> StepResult:
        if self._env is None:
            raise RuntimeError("ALFWorld step() before reset(): call reset(task_id) first.")
        if self._done:
            raise RuntimeError("ALFWorld episode is over: call reset(task_id) to start a new one.")
        self._steps += 1
        action = (action or "").strip()
        truncated = self._steps >= self.default_max_steps
        if not action or action.lower().startswith("think:"):
            reply = THINK_REPLY if action else NOTHING
            self._done = truncated
            return StepResult(reply, 0.0, truncated, False, None, self._admissible,
                              {"think": bool(action), "invalid": not action, "truncated": truncated})
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                state, score, done = self._env.step(action)
        except Exception as exc:  # noqa: BLE001
            self._cache.pop(self._task_id or "", None)
            self._env = None
            raise EnvCrashed(f"ALFWorld game {self._task_id} crashed on '{action}': {type(exc).__name__}: {exc}") \
                from exc
        self._state = state
        won = bool(state.get("won"))
        self._admissible = list(state.get("admissible_commands") or []) or None
        self._done = bool(done) or won or truncated
        return StepResult(clean_observation(state.feedback), float(score or 0.0), self._done, won, None,
                          self._admissible, {"truncated": truncated and not won})

    def admissible_actions(self) -> list[str] | None:
        return self._admissible

    def expert_action(self) -> str | None:
        """Next action of ALFWorld's hand-coded expert (env made with expert=true), for data and checks."""
        if not self.expert:
            raise RuntimeError("expert_action() needs the env made with expert=true (--env-opt expert=true).")
        plan = (self._state or {}).get("extra.expert_plan") or []
        return plan[0] if plan else None

    def restart(self) -> None:
        """Drop every loaded game; the next reset loads it afresh."""
        self.close()

    def close(self) -> None:
        while self._cache:
            _, env = self._cache.popitem()
            _close(env)
        self._env = None


def _close(env: Any) -> None:
    with contextlib.suppress(Exception):
        env.close()


@dataclasses.dataclass(frozen=True)
class Options:
    """ALFWorld's options (`--env-opt key=value`)."""

    data: str | None = None
    """ALFWorld data folder; none = $ALFWORLD_DATA, else the offline archive."""
    split: str | None = None
    """Default split of `task_ids` (a ReAct name such as eval_out_of_distribution, or the folder name)."""
    cache_games: int = setting(4, integer_at_least(0))
    """Parsed games kept in memory."""
    max_steps: int = setting(50, integer_at_least(1))
    """Actions per episode (ReAct's limit)."""
    expert: bool = False
    """Build the handcoded expert, which enables `expert_action()` (for M_sa training data)."""
    shots: int = setting(2, Allowed(lambda v, _: v in (0, 1, 2), "0, 1 or 2"))
    """Few-shot examples per prompt: 2 as in ReAct, fewer for small context windows or slow CPUs."""


def make_env(opts: Options | Mapping[str, Any] | None = None, **options: Any) -> AlfworldEnv:
    """The env from an `Options` or from keyword options (`make_env(split=..., shots=0)`)."""
    return AlfworldEnv(**dataclasses.asdict(build_options(Options, opts or options, "alfworld")))


def report_tables(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Success rate per ALFWorld task type and agent (as ReAct / Reflexion report it)."""
    by: dict[tuple[str, str], list[bool]] = collections.defaultdict(list)
    for r in records:
        if r.get("env") != "alfworld":
            continue
        try:
            family = awd.react_family(str(r["task"]))
        except ValueError:
            continue
        by[(str(r.get("agent")), family)].append(bool(r.get("success")))
    if not by:
        return []
    families = sorted({f for _, f in by})
    agents = sorted({a for a, _ in by})
    rows = ["| agent | " + " | ".join(families) + " |", "| --- |" + " --- |" * len(families)]
    for a in agents:
        cells = []
        for f in families:
            s = by.get((a, f), [])
            cells.append(f"{100 * sum(s) / len(s):.0f}% ({len(s)})" if s else "-")
        rows.append(f"| {a} | " + " | ".join(cells) + " |")
    return [("ALFWorld success rate by task type (episodes)", "\n".join(rows))]
