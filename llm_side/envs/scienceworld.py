"""ScienceWorld (Wang et al. 2022) as a `TextEnv`: 30 task types, train/dev/test variations, score
0-100, with a guard that turns a dead or hung JVM into `EnvCrashed`.

Task ids: 'TYPE/varN' with TYPE a paper id ('4-1') or an env task name ('find-living-thing').
A bare TYPE means the first variation of the env's split. `task_ids(split)` lists the first
`variations_per_task` variations of each type (3 by default, as the paper tests three variants), so
`--tasks 4-1` runs one game and the default task list runs the paper's 90.

Speed: each step talks to the JVM directly (not through `ScienceWorldEnv.step`, which also builds
the valid-action listing: ~12 steps/s instead of ~280/s); `admissible_actions()` builds the listing
only when an agent asks. Scores below 0 (ScienceWorld's 'task failed') are reported as 0 with the
raw value in `info['raw_score']`, the convention of the paper's Table 1.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from llm_side.envs import scienceworld_tasks as tasks
from llm_side.harness.contracts import EnvCrashed, Observation, StepResult
from muse_common.settings import build_options, integer_at_least, number_above, setting

DEFAULT_MAX_STEPS = 100
THINK_PREFIX = "think:"
THINK_REPLY = "OK."


class ScienceWorldTextEnv:
    """One ScienceWorld JVM running one episode at a time (~0.5 GB; ~4 s to start)."""

    name = "scienceworld"
    default_max_steps = DEFAULT_MAX_STEPS

    def __init__(self, split: str = "test", variations_per_task: int = 3, simplifications: str = "",
                 step_timeout_s: float = 30.0, jar_path: str | None = None):
        if split not in tasks.SPLITS:
            raise ValueError(f"unknown ScienceWorld split '{split}'; choose one of {', '.join(tasks.SPLITS)}.")
        if int(variations_per_task) < 1:
            raise ValueError(f"variations_per_task must be >= 1, got {variations_per_task}.")
        self.split = split
        self.variations_per_task = int(variations_per_task)
        self.simplifications = simplifications
        self.step_timeout_s = float(step_timeout_s)
        self.jar_path = jar_path
        self.last_result: StepResult | None = None
        self._sw: Any = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._variations: dict[tuple[str, str], list[int]] = {}
        self._last_score = 0
        self._start()

    # ---- JVM lifecycle -------------------------------------------------------------------------
    def _start(self) -> None:
        try:
            from scienceworld import ScienceWorldEnv
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError("ScienceWorld is not installed: pip install 'scienceworld==1.2.3' "
                              "(needs Java 17: apt-get install default-jre-headless).") from e
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="scienceworld")
        self._sw = self._guarded(lambda: ScienceWorldEnv("", serverPath=self.jar_path, envStepLimit=10**9),
                                 "starting the JVM", check_alive=False,
                                 timeout=max(120.0, self.step_timeout_s))

    @property
    def jvm_pid(self) -> int | None:
        """Process id of this env's Java process (None when stopped)."""
        if self._sw is None:
            return None
        return self._sw._gateway.java_process.pid

    def _dispose(self) -> None:
        """Kill the JVM and drop the gateway without talking to a possibly dead process."""
        sw, self._sw = self._sw, None
        if sw is not None:
            # py4j retries a killed JVM from the abandoned call's thread and logs every refusal
            logging.getLogger("py4j").setLevel(logging.CRITICAL)
            proc = sw._gateway.java_process
            sw.close = lambda: None  # its __del__ would write to a dead JVM's stdin
            try:
                proc.kill()
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - already gone is fine
                pass
            try:  # close sockets locally; never send a command to the dead JVM (py4j would retry loudly)
                sw._gateway.close()
                sw._gateway.shutdown_callback_server()
            except Exception:  # noqa: BLE001
                pass
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _guarded(self, fn: Callable[[], Any], what: str, check_alive: bool = True,
                 timeout: float | None = None) -> Any:
        """Run one JVM call with a timeout; a dead or silent JVM becomes EnvCrashed (JVM killed)."""
        if self._pool is None or (check_alive and self._sw is None):
            raise EnvCrashed(f"ScienceWorld JVM is not running ({what}); call restart() to start a new one.")
        if check_alive:
            code = self._sw._gateway.java_process.poll()
            if code is not None:
                self._dispose()
                raise EnvCrashed(f"ScienceWorld JVM had exited (code {code}) before {what}; "
                                 "restart() starts a new one.")
        future = self._pool.submit(fn)
        try:
            return future.result(timeout=timeout or self.step_timeout_s)
        except concurrent.futures.TimeoutError:
            self._dispose()
            limit = timeout or self.step_timeout_s
            raise EnvCrashed(f"ScienceWorld JVM hung: no answer to {what} within {limit:.0f} s "
                             "(killed; restart() starts a new one).") from None
        except Exception as e:
            from py4j.protocol import Py4JError, Py4JJavaError

            if isinstance(e, Py4JError | ConnectionError | OSError):
                self._dispose()
                verb = "raised a Java error" if isinstance(e, Py4JJavaError) else "died"
                raise EnvCrashed(f"ScienceWorld JVM {verb} during {what}: {type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")) from e
            raise

    def restart(self) -> None:
        """Kill whatever is left of the JVM and start a fresh one (the next reset loads the task)."""
        self._dispose()
        self.last_result = None
        self._start()

    def close(self) -> None:
        self._dispose()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self._dispose()
        except Exception:  # noqa: BLE001
            pass

    # ---- tasks -----------------------------------------------------------------------------------
    def variations(self, task_type: str, split: str | None = None) -> list[int]:
        """Variation indices of a task type in a split (asks the JVM once, then cached)."""
        split = split or self.split
        if split not in tasks.SPLITS:
            raise ValueError(f"unknown ScienceWorld split '{split}'; choose one of {', '.join(tasks.SPLITS)}.")
        tt = tasks.resolve_task_type(task_type)
        key = (tt.name, split)
        if key not in self._variations:
            sw = self._sw
            self._guarded(lambda: sw.load(tt.name, 0, ""), f"loading {tt.name}")
            for s, getter in (("train", sw.get_variations_train), ("dev", sw.get_variations_dev),
                              ("test", sw.get_variations_test)):
                self._variations[(tt.name, s)] = sorted(self._guarded(getter, f"listing {s} variations"))
        return self._variations[key]

    def task_ids(self, split: str | None = None) -> list[str]:
        """'TYPE/varN' for the first `variations_per_task` variations of each of the 30 types.
        Loads each task once in the JVM (~15 s in all); call it before an episode, not during one."""
        out = []
        for tt in tasks.TASK_TYPES:
            for v in self.variations(tt.paper_id, split)[: self.variations_per_task]:
                out.append(tasks.format_task_id(tt, v))
        return out

    def expand_task_ids(self, specs: list[str]) -> list[str]:
        """Canonical ids for `--tasks`: '4-1' or 'find-living-thing' -> the split's first variation
        ('4-1/var225' on test), 'boil/var3' -> '1-1/var3'. Bad ids raise ValueError naming the fix."""
        out = []
        for spec in specs:
            tt, var = self.resolve(spec)
            self._check_variation(tt, var, spec)
            out.append(tasks.format_task_id(tt, var))
        return out

    def _check_variation(self, tt: tasks.TaskType, var: int, task_id: str) -> None:
        sw = self._sw
        n = self._guarded(lambda: sw.get_max_variations(tt.name), "counting variations")
        if not 0 <= var < n:
            raise ValueError(f"task '{task_id}': variation {var} does not exist; {tt.paper_id} ({tt.name}) "
                             f"has variations 0..{n - 1}.")

    def resolve(self, task_id: str) -> tuple[tasks.TaskType, int]:
        """(task type, variation) of a task id; a bare type picks the split's first variation."""
        tt, var = tasks.parse_task_id(task_id)
        if var is None:
            var = self.variations(tt.paper_id)[0]
        return tt, var

    # ---- episode ---------------------------------------------------------------------------------
    def reset(self, task_id: str, seed: int = 0) -> Observation:
        """Load variation and reset. ScienceWorld variations are deterministic, so `seed` is unused."""
        tt, var = self.resolve(task_id)
        sw = self._sw
        if sw is None:
            raise EnvCrashed("ScienceWorld JVM is not running; call restart() to start a new one.")
        self._check_variation(tt, var, task_id)
        self._guarded(lambda: sw.load(tt.name, var, self.simplifications), f"loading {tt.name} var {var}")
        self._guarded(sw.server.reset, "reset")
        text = self._guarded(lambda: sw.server.step("look around"), "the first look around")
        task = self._guarded(sw.server.freeActionTaskDesc, "reading the task")
        task = task.replace("Task Description:", "", 1).strip()
        self._last_score = 0
        self.last_result = None
        info = {"task_type": tt.paper_id, "task_name": tt.name, "variation": var, "split": self.split,
                "length_class": tt.length_class}
        return Observation(text=text, task=task, admissible_actions=None, info=info)

    def step(self, action: str) -> StepResult:
        sw = self._sw
        if sw is None:
            raise EnvCrashed("ScienceWorld JVM is not running; call restart() to start a new one.")
        action = " ".join(str(action).split())
        if action.lower().startswith(THINK_PREFIX):  # ReAct's virtual think step: no game time passes
            obs, raw, completed = THINK_REPLY, self._last_score, False
        elif not action:
            obs, raw, completed = "No known action matches that input.", self._last_score, False
        else:
            def call() -> tuple[str, int, bool]:
                o = sw.server.step(action)
                return o, int(round(100 * sw.server.getScore())), bool(sw.server.getCompleted())

            obs, raw, completed = self._guarded(call, f"step '{action[:60]}'")
        reward = float(raw - self._last_score)
        self._last_score = raw
        won = raw >= 100
        done = completed or won or raw < 0
        result = StepResult(observation=obs, reward=reward, done=done, won=won, score=float(max(raw, 0)),
                            admissible_actions=None, info={"raw_score": raw})
        self.last_result = result
        return result

    def admissible_actions(self) -> list[str] | None:
        """The valid action-object combinations now (~80 ms each call: built only on request)."""
        sw = self._sw
        if sw is None:
            raise EnvCrashed("ScienceWorld JVM is not running; call restart() to start a new one.")
        return list(self._guarded(sw.server.getValidActionObjectCombinations, "listing valid actions"))

    def possible_objects(self) -> list[str]:
        """Names of the objects the agent can refer to now."""
        sw = self._sw
        return list(self._guarded(sw.server.getPossibleObjects, "listing objects"))

    def action_templates(self) -> list[str]:
        """The simulator's action templates ('open OBJ', 'connect OBJ to OBJ', ...)."""
        sw = self._sw
        return list(self._guarded(sw.server.getPossibleActions, "listing action templates"))

    # ---- prompt material for env-generic agents ----------------------------------------------------
    def instructions(self) -> str:
        return tasks.ACTION_HELP

    def react_examples(self, task_id: str) -> str:
        tt, _ = tasks.parse_task_id(task_id)
        return tasks.react_examples(tt)


@dataclasses.dataclass(frozen=True)
class Options:
    """ScienceWorld's options (`--env-opt key=value`)."""

    split: str = "test"
    """Variation split the task ids come from: test, dev or train."""
    variations_per_task: int = setting(3, integer_at_least(1))
    """Variations of each task type that `task_ids` lists."""
    simplifications: str = ""
    """ScienceWorld simplifications preset or comma list (e.g. `easy`); empty = none."""
    step_timeout_s: float = setting(30.0, number_above(0))
    """Seconds one env step may take before the episode is abandoned as an env crash."""
    jar_path: str | None = None
    """ScienceWorld server jar; none = the one the scienceworld package ships."""


def make_env(opts: Options | Mapping[str, Any] | None = None, **options: Any) -> ScienceWorldTextEnv:
    """The env from an `Options` or from keyword options (`make_env(split="dev")`)."""
    return ScienceWorldTextEnv(**dataclasses.asdict(build_options(Options, opts or options, "scienceworld")))


# ---- Table 1 -------------------------------------------------------------------------------------
def _task_type_of(record: dict[str, Any]) -> tasks.TaskType | None:
    try:
        return tasks.parse_task_id(str(record.get("task", "")))[0]
    except ValueError:
        return None


def table1(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Table 1's layout as (header, rows): per task type the mean score of each agent, then
    Short / Medium / Long / Overall (means over task types, as in the paper) and steps per episode."""
    score: dict[tuple[str, str], list[float]] = defaultdict(list)
    steps: dict[str, list[float]] = defaultdict(list)
    agents: list[str] = []
    for r in records:
        if r.get("env", "scienceworld") != "scienceworld":
            continue
        tt = _task_type_of(r)
        if tt is None:
            continue
        agent = str(r.get("agent", "?"))
        if agent not in agents:
            agents.append(agent)
        score[(tt.paper_id, agent)].append(float(r.get("score") or 0.0))
        steps[agent].append(float(r.get("steps") or 0))
    header = ["Task Type", "Length"] + agents
    rows: list[list[str]] = []
    per_type: dict[str, dict[str, float]] = defaultdict(dict)
    for tt in tasks.TASK_TYPES:
        if not any((tt.paper_id, a) in score for a in agents):
            continue
        row = [f"{tt.paper_id}({tt.length_class})", f"{tt.oracle_length:g}"]
        for a in agents:
            vals = score.get((tt.paper_id, a))
            if vals:
                per_type[a][tt.paper_id] = statistics.fmean(vals)
                row.append(f"{per_type[a][tt.paper_id]:.2f}")
            else:
                row.append("-")
        rows.append(row)
    present = [tt for tt in tasks.TASK_TYPES if any(tt.paper_id in per_type[a] for a in agents)]
    groups = [(tasks.LENGTH_NAMES[c], [t for t in present if t.length_class == c]) for c in "SML"]
    groups.append(("Overall", present))
    for title, members in groups:
        if not members:
            continue
        row = [title, f"{statistics.fmean(t.oracle_length for t in members):.2f}"]
        for a in agents:
            vals = [per_type[a][t.paper_id] for t in members if t.paper_id in per_type[a]]
            row.append(f"{statistics.fmean(vals):.2f}" if vals else "-")
        rows.append(row)
    rows.append(["Steps/episode", "-"] + [f"{statistics.fmean(steps[a]):.1f}" for a in agents])
    return header, rows


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report_tables(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Hook for `muse-llm report`: the paper's Table 1 (mean score 0-100 per task type and agent)."""
    header, rows = table1(records)
    if len(header) <= 2:
        return []
    return [("ScienceWorld scores (Table 1 layout; S/M/L = oracle-length class; each cell averages EVERY trial "
             "record of the task type, failed trials before a success included, not one score per task)",
             _markdown(header, rows))]
