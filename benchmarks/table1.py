"""MUSE Table 1 over seeds: committed runs in, the table with 95% intervals and paired tests out.

Why: one run of 20 episodes per task cannot tell MUSE from Dreamer-v3; a claim needs seeds, intervals
and a paired comparison. `add` turns the run folders of one seed, RUNS/muse and RUNS/dreamer with adapt/ in
each (`benchmarks/gpu_table1.sh`'s RUNS/seed<K>, or `muse-wm pretrain` + `adapt` by hand; a `pretrain --seeds`
folder DIR/seed<K> is one agent's run folder), into one JSON line per agent in a committed file; the docs page
`experiments/table1.md` is generated from those lines (`benchmarks/pages.py`).

- Intervals: a two-level bootstrap (resample seeds, then episodes within each seed), 2000 draws, seeded,
  so a page renders the same from the same lines. Self-awareness is scored per step, pooled over the
  resampled episodes, as `muse_jax.evaluate` does for one run.
- In distribution: the last pre-training window's `sa/*` (the agent's own most recent episodes on the
  pre-training tasks, `train.sa_window`), beside the novel-task figures.
- MUSE vs Dreamer-v3, paired by (seed, task, episode index): an exact McNemar test on successes and a
  paired bootstrap interval of the AUROC difference.
- An incomplete run (a time limit stopped adaptation) is kept and marked: its episodes count, the page
  says how many of the planned ones exist.

    python -m benchmarks.table1 add runs/seed0 --config small --device "NVIDIA H200" --seed 0 \\
        --planned 40 --pretrain-wall-s 281 --adapt-wall-s 218 --out docs/table1/small.jsonl
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DRAWS = 2000
RECORD_FIELDS = ("task", "episode", "success", "time_to_success", "length", "signal", "psi1", "quantile", "value")
"""What a committed line keeps of each adaptation record (the per-step signals, not the regulation sizes)."""


def step_arrays(episodes: Sequence[dict[str, Any]], key: str = "signal") -> tuple[np.ndarray, np.ndarray]:
    """(per-step scores, per-step outcome labels) pooled over episodes."""
    if not episodes:
        return np.zeros(0), np.zeros(0, bool)
    s = np.concatenate([np.asarray(e[key], float) for e in episodes])
    y = np.concatenate([np.full(len(e[key]), bool(e["success"])) for e in episodes])
    return s, y


def figures(agent: str, episodes: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Success rate, AUROC and accuracy (MUSE psi_1 > 1/2; Dreamer value > median) of pooled episodes."""
    from muse_common.metrics import median_threshold, rank_auroc

    out = {"success_rate": float(np.mean([bool(e["success"]) for e in episodes])) if episodes else math.nan}
    s, y = step_arrays(episodes)
    out["auroc"] = rank_auroc(s, y)
    # the control for accuracy: a constant "fail" prediction scores the share of steps in failed episodes
    out["constant_fail_accuracy"] = float(1.0 - y.mean()) if y.size else math.nan
    if agent == "muse" and episodes and all("psi1" in e for e in episodes):
        p, y1 = step_arrays(episodes, "psi1")
        out["accuracy"] = float(np.mean((p > 0.5) == y1)) if p.size else math.nan  # = muse_common accuracy
    else:
        out["accuracy"] = float(np.mean((s > median_threshold(s)) == y)) if s.size else math.nan
    return out


class _Pool:
    """Episodes' per-step scores compared once, so a resample, given as how often each episode was drawn,
    is scored by weighting instead of concatenating and re-ranking: exactly `figures` of the resampled
    episodes, for thousands of draws at once.

    The AUROC is the Mann-Whitney statistic with ties counting one half, so over a resample it is
    sum_{e succeeded, f failed} n_e n_f K[e, f] / (steps in successes * steps in failures), where K[e, f]
    counts the (step of e, step of f) pairs that e ranks above f; K is counted once per pool."""

    CHUNK = 4_000_000  # draws x steps held at once for the median threshold

    def __init__(self, episodes: Sequence[dict[str, Any]], agent: str | None = None):
        """agent: whose accuracy reading `figures` gives (MUSE's psi1 > 0.5, else the median threshold);
        None for a pool that is only asked for its AUROC (the paired difference)."""
        self.episodes, self.agent = episodes, agent
        self.signals = signals = [np.asarray(e["signal"], float) for e in episodes]
        self.success = np.array([bool(e["success"]) for e in episodes])
        self.steps = np.array([len(x) for x in signals], float)
        self.pos, self.neg = np.flatnonzero(self.success), np.flatnonzero(~self.success)
        above = [signals[i] for i in self.pos]
        owner = np.repeat(np.arange(len(above)), [len(x) for x in above])
        scores = np.concatenate(above) if above else np.zeros(0)
        self.k = np.zeros((len(self.pos), len(self.neg)))
        for j, f in enumerate(self.neg):
            t = np.sort(signals[f])
            lo, hi = np.searchsorted(t, scores, "left"), np.searchsorted(t, scores, "right")
            self.k[:, j] = np.bincount(owner, lo + 0.5 * (hi - lo), minlength=len(above))

    def _prepare_accuracy(self) -> None:
        """What the accuracy reading needs, made once on the first `figures` call."""
        if hasattr(self, "psi1"):
            return
        if self.agent is None:
            raise ValueError("_Pool: give the agent to read an accuracy (only the AUROC is agent-free)")
        episodes = self.episodes
        self.psi1 = self.agent == "muse" and all("psi1" in e for e in episodes)
        if self.psi1:
            self.correct = np.array([np.sum((np.asarray(e["psi1"], float) > 0.5) == bool(e["success"]))
                                     for e in episodes], float)
            self.psi1_steps = np.array([len(e["psi1"]) for e in episodes], float)
        else:  # the median threshold needs the pooled steps in score order
            s = np.concatenate(self.signals) if self.signals else np.zeros(0)
            order = np.argsort(s, kind="stable")
            self.s = s[order]
            self.ep = np.repeat(np.arange(len(episodes)), self.steps.astype(int))[order]
            self.y = self.success[self.ep]

    def figures(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        """`figures` of each resample; counts: [draws, episodes], how often each episode was drawn."""
        self._prepare_accuracy()
        c = np.asarray(counts, float)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = {"success_rate": c @ self.success / c.sum(1), "auroc": self.auroc(c),
                   "constant_fail_accuracy": 1.0 - c[:, self.pos] @ self.steps[self.pos] / (c @ self.steps)}
            if self.psi1:
                out["accuracy"] = c @ self.correct / (c @ self.psi1_steps)
            else:
                rows = max(1, self.CHUNK // max(1, self.s.size))
                out["accuracy"] = np.concatenate([self._median_accuracy(c[i:i + rows])
                                                  for i in range(0, len(c), rows)]) if len(c) else np.zeros(0)
        return out

    def auroc(self, counts: np.ndarray) -> np.ndarray:
        """The per-step AUROC of each resample (NaN where one outcome class is missing)."""
        c = np.asarray(counts, float)
        cp, cn = c[:, self.pos], c[:, self.neg]
        with np.errstate(invalid="ignore", divide="ignore"):
            return ((cp @ self.k) * cn).sum(1) / ((cp @ self.steps[self.pos]) * (cn @ self.steps[self.neg]))

    def _median_accuracy(self, c: np.ndarray) -> np.ndarray:
        """Accuracy of 'above the median of the pooled steps (np.median of the multiset) succeeds'."""
        if not self.s.size:
            return np.full(len(c), math.nan)
        w = c[:, self.ep]
        cum = np.cumsum(w, axis=1)
        m = cum[:, -1].astype(int)
        at = lambda k: self.s[np.minimum(np.argmax(cum > k[:, None], axis=1), self.s.size - 1)]  # noqa: E731
        median = np.where(m % 2 == 1, at((m - 1) // 2), 0.5 * (at(m // 2 - 1) + at(m // 2)))
        return (w * ((self.s[None, :] > median[:, None]) == self.y[None, :])).sum(1) / cum[:, -1]


def _interval(values: np.ndarray, draws: int) -> tuple[float, float]:
    """The 95% percentile interval of the finite draws, or NaNs when fewer than half are finite."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    return (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) if v.size >= draws // 2 else (
        math.nan, math.nan)


def bootstrap(agent: str, by_seed: Sequence[Sequence[dict[str, Any]]], draws: int = DRAWS, seed: int = 0,
              ) -> dict[str, tuple[float, float]]:
    """95% percentile intervals of `figures` by resampling seeds, then episodes within each seed."""
    rng = np.random.default_rng(seed)
    seeds = [list(s) for s in by_seed if s]
    if not seeds:
        return {}
    first = np.cumsum([0] + [len(s) for s in seeds])
    counts = np.zeros((draws, first[-1]))
    for d in range(draws):
        drawn = [first[i] + rng.integers(0, len(seeds[i]), len(seeds[i]))
                 for i in rng.integers(0, len(seeds), len(seeds))]
        counts[d] = np.bincount(np.concatenate(drawn), minlength=first[-1])
    pool = _Pool([e for s in seeds for e in s], agent)
    return {k: _interval(v, draws) for k, v in pool.figures(counts).items()}


def paired(muse: Sequence[dict[str, Any]], dreamer: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """MUSE vs Dreamer-v3 on the episodes both have ((seed, task, episode) keys): McNemar on successes and a
    bootstrap interval of the AUROC difference (MUSE minus Dreamer) over the paired episodes."""
    from scipy import stats

    key = lambda e: (e.get("seed"), e["task"], e["episode"])
    d = {key(e): e for e in dreamer}
    pairs = [(m, d[key(m)]) for m in muse if key(m) in d]
    if not pairs:
        return {"pairs": 0}
    a = np.array([bool(m["success"]) for m, _ in pairs])
    b = np.array([bool(x["success"]) for _, x in pairs])
    only_m, only_d = int(np.sum(a & ~b)), int(np.sum(~a & b))
    p = float(stats.binomtest(only_m, only_m + only_d, 0.5).pvalue) if only_m + only_d else 1.0
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, len(pairs), len(pairs)), minlength=len(pairs))
                       for _ in range(DRAWS)])
    diffs = _Pool([m for m, _ in pairs]).auroc(counts) - _Pool([x for _, x in pairs]).auroc(counts)
    return {"pairs": len(pairs), "muse_only": only_m, "dreamer_only": only_d, "mcnemar_p": p,
            "auroc_difference_ci95": _interval(diffs, DRAWS)}


def _json_object(path: Path, what: str) -> dict[str, Any]:
    """A run folder's JSON settings or results file as a dict, or ValueError naming it in one line."""
    if not path.is_file():
        raise ValueError(f"{path} is missing: {what} is not a finished run (rerun `muse-wm adapt` into it, or "
                         "name a finished one).")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not {what} (not a JSON object); rerun `muse-wm adapt` into a new --logdir.")
    return data


def adapt_results(folder: Path, *, agent: str | None = None, reading: str | None = None) -> dict[str, Any]:
    """An adapt folder's `results.json`, checked, for every benchmark that reads one: a JSON object with a
    positive integer `max_steps`, from an adaptation of `agent` (its `agent` field) and with the competence
    reading `reading` (`competence_reading`, `steps_left` in results from before the field) where given. A
    run of another agent or reading would otherwise be counted in the wrong column without a word."""
    path = folder / "results.json"
    r = _json_object(path, "an adaptation's results")
    if not isinstance(r.get("max_steps"), int) or isinstance(r["max_steps"], bool) or r["max_steps"] < 1:
        raise ValueError(f"{path} is not an adaptation's results (no positive integer max_steps); rerun "
                         "`muse-wm adapt` into a new --logdir.")
    if agent is not None and r.get("agent") != agent:
        raise ValueError(f"{path} is an adaptation of agent {r.get('agent')!r}, but is read as {agent!r}'s; "
                         "give each agent's run folder in its own place.")
    if reading is not None and r.get("competence_reading", "steps_left") != reading:
        raise ValueError(f"{path} was adapted with model.competence_reading={r.get('competence_reading')!r}, "
                         f"but is given as {reading}=; give each run under its own reading.")
    return r


def compact(record: dict[str, Any], seed: int) -> dict[str, Any]:
    """An adaptation record as a committed line keeps it."""
    return {"seed": seed, **{k: record[k] for k in RECORD_FIELDS if k in record}}


def run_line(run: Path, agent: str, *, config: str, device: str, seed: int, commit: str,
             planned: int | None) -> dict[str, Any]:
    """One agent's committed line from its pretrain folder (`metrics.jsonl`) and its `adapt/episodes.jsonl`."""
    from muse_common.files import read_jsonl

    metrics = list(read_jsonl(run / "metrics.jsonl", ("step",)))
    stopped = metrics[-1] if metrics else {}
    # adaptation starts from the newest checkpoint, which a time limit can leave behind the last logged row:
    # the pre-training figures are those of the row at the checkpoint's step
    adapt_meta = run / "adapt" / "adapt.json"
    settings = _json_object(adapt_meta, "an adaptation's settings") if adapt_meta.is_file() else {}
    if "agent" in settings and settings["agent"] != agent:
        raise ValueError(f"{adapt_meta}: an adaptation of agent {settings['agent']!r}, but found as {agent!r}'s "
                         f"({run}); give each agent's run folder in its own place.")
    ckpt = settings.get("step")
    if ckpt is not None and (not isinstance(ckpt, int) or isinstance(ckpt, bool)):
        raise ValueError(f"{adapt_meta}: step {ckpt!r} is not an integer; rerun `muse-wm adapt` into a new "
                         "--logdir.")
    at_ckpt = [m for m in metrics if ckpt is None or m.get("env_steps", m["step"]) <= ckpt]
    last = at_ckpt[-1] if at_ckpt else {}
    sa = {k.removeprefix("sa/"): v for k, v in last.items() if k.startswith("sa/")}
    windows = [{"step": m["step"], "success_rate": m.get("success_rate"), "sa_auroc": m.get("sa/auroc"),
                "sa_successes": m.get("sa/successes")} for m in at_ckpt if "success_rate" in m]
    records = list(read_jsonl(run / "adapt" / "episodes.jsonl", ("task", "episode", "success")))
    return {"table1": config, "agent": agent, "seed": seed, "device": device, "commit": commit,
            "pretrain": {"env_steps": last.get("env_steps"), "train_steps": last.get("train_steps"),
                         "episodes": last.get("episodes"), "sa_last_window": sa, "windows": windows,
                         "stopped_at_env_steps": stopped.get("env_steps")},
            "adapt_episodes_planned": planned, "adapt_episodes": len(records),
            "episodes": [compact(r, seed) for r in records]}


def quickstart_record(runs: Path, *, command: str, measured: str, machine: str, wall_s: int | None,
                      budget: str) -> dict[str, Any]:
    """docs/quickstart/results.json from a quickstart's run folders (`runs/quickstart`): each agent's adapt
    `results.json` figures and its last pre-training window's self-awareness, plus the paper's Table 1."""
    from muse_common.files import read_jsonl
    from muse_jax.evaluate import PAPER_TABLE1, _cell

    agents = {}
    for agent, label in (("muse", "MUSE"), ("dreamer", "Dreamer-v3")):
        r = adapt_results(runs / agent / "adapt", agent=agent)
        note = _cell(r, "sa_accuracy", True)
        last = [m for m in read_jsonl(runs / agent / "metrics.jsonl", ("step",)) if "sa/episodes" in m][-1:]
        agents[agent] = {
            "label": label, **{k: r.get(k) for k in ("sa_accuracy", "sa_accuracy_n_half", "sa_auroc",
                                                     "sa_quantile_accuracy", "success_rate", "tasks_solved",
                                                     "episodes", "mean_time_to_success",
                                                     "mean_time_to_success_solved", "sa_auroc_raw_value")},
            "sa_accuracy_note": note[note.index("(") + 1:-1] if "(" in note else None,
            "n_tasks": len(r["tasks"]),
            "tasks": {t["task"]: {"success_rate": t["success_rate"], "mean_steps": t["mean_time_to_success"]}
                      for t in r["tasks"]},
            "pretrain_sa": {k.removeprefix("sa/"): v for k, v in (last[0] if last else {}).items()
                            if k.startswith("sa/") and k.count("/") == 1},
            "pretrain_env_steps": last[0]["env_steps"] if last else None,
        }
    paper = {a: {"sa_accuracy": v["sa_accuracy"], "sa_auroc": v["sa_auroc"], "tasks_solved":
                 int(v["tasks_solved_fraction"].split("/")[0]), "n_tasks": 10, "episodes": 200}
             for a, v in PAPER_TABLE1.items()}
    return {"source": "made by `python -m benchmarks.table1 quickstart` from runs/quickstart/{muse,dreamer} "
                      "(adapt/results.json and the last pre-training window of metrics.jsonl)",
            "command": command, "measured": measured, "machine": machine, "wall_s": wall_s, "seed": 0,
            "budget": budget, "agents": agents, "paper": paper}


def main() -> None:
    from benchmarks.report import git_commit
    from muse_common.arg_parser import ArgumentParser, path_text_arg
    from muse_common.files import append_jsonl

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    add = sub.add_parser("add", help="append one seed's MUSE and Dreamer lines from its run folders")
    add.add_argument("runs", help="folder with muse/ and dreamer/ pretrain run folders (each with adapt/)")
    add.add_argument("--config", required=True)
    add.add_argument("--device", required=True, help="the machine, in words")
    add.add_argument("--seed", type=int, required=True)
    add.add_argument("--planned", type=int, default=None, help="adaptation episodes the run was to collect")
    add.add_argument("--commit", default=None, help="the code that ran (default: this checkout's HEAD)")
    add.add_argument("--command", default=None, help="the command that made the runs, as the page shows it")
    add.add_argument("--pretrain-wall-s", type=int, default=None, help="pre-training wall time of the run")
    add.add_argument("--adapt-wall-s", type=int, default=None, help="adaptation wall time of the run")
    add.add_argument("--out", required=True, type=path_text_arg)
    qs = sub.add_parser("quickstart", help="write docs/quickstart/results.json from a quickstart's run folders")
    qs.add_argument("runs", help="the quickstart's folder (runs/quickstart)")
    qs.add_argument("--measured", required=True, help="the date of the run")
    qs.add_argument("--machine", required=True)
    qs.add_argument("--wall-s", type=int, default=None)
    qs.add_argument("--budget", required=True)
    qs.add_argument("--out", required=True, type=path_text_arg)
    args = p.parse_args()
    if args.cmd == "quickstart":
        from muse_common.files import atomic_write_json

        try:
            record = quickstart_record(Path(args.runs), command="bash scripts/quickstart.sh",
                                       measured=args.measured, machine=args.machine, wall_s=args.wall_s,
                                       budget=args.budget)
        except (ValueError, OSError) as e:
            raise SystemExit(f"table1 quickstart: {e}") from None
        atomic_write_json(args.out, record)
        return
    commit = args.commit or git_commit()
    from muse_common.files import read_jsonl

    added = {(x.get("table1"), x.get("agent"), x.get("seed")) for x in read_jsonl(args.out, ("agent", "seed"))}
    lines = []
    for agent in ("muse", "dreamer"):
        if (args.config, agent, args.seed) in added:  # its episodes would count twice and pair with themselves
            raise SystemExit(f"table1 add: {args.out} already holds {agent} seed {args.seed} of {args.config}; "
                             "give another --seed, or remove that line to replace it.")
        try:
            line = run_line(Path(args.runs) / agent, agent, config=args.config, device=args.device,
                            seed=args.seed, commit=commit, planned=args.planned)
        except (ValueError, OSError) as e:  # someone else's run folder: one line, nothing appended
            raise SystemExit(f"table1 add: {e}") from None
        if args.command:
            line["command"] = args.command
        if args.pretrain_wall_s is not None:
            line["pretrain"]["wall_s"] = args.pretrain_wall_s
        if args.adapt_wall_s is not None:
            line["adapt_wall_s"] = args.adapt_wall_s
        lines.append(line)
    for line in lines:  # both agents' lines or neither
        append_jsonl(args.out, line)
        print(json.dumps({k: line[k] for k in ("agent", "seed", "adapt_episodes")}))


if __name__ == "__main__":
    main()
