"""MUSE §3.2.2 metrics on adaptation episodes, and the paper's outputs (Table 1, Figures 5 and 6).

Input is a list of episode records, one per adaptation episode:
`{"task": str, "episode": int, "success": bool, "time_to_success": int (-1 = never), "signal": [float]}`
where `signal` holds the agent's step-wise self-awareness prediction (MUSE: competence sum, 0..N;
Dreamer: critic value / return scale). Every step's prediction is scored against its episode's
outcome, pooled over all tasks. Accuracy (`sa_accuracy`, Table 1's row): MUSE's binary prediction
consistent with the labels, "succeeds within the time limit" iff psi_1 > 1/2 (psi_1 is the quantile
whose label is 1 exactly when the episode succeeds within L; records carry it as `psi1`); Dreamer at the
median of all its values (the paper's choice). The earlier MUSE rule, sum(psi) > N/2, is kept as the
named variant `sa_accuracy_n_half`: it asks for success within the first ~half of the remaining time, so
it counts even a perfect predictor wrong on every step more than ~0.6 L before a success. Records
without `psi1` (older runs) fall back to the N/2 rule for `sa_accuracy`; `sa_accuracy_rule` says which
rule was used. MUSE records also hold `quantile` [T], the predicted success-quantile
class per step (how many psi_i > 1/2, 0..N); `sa_quantile_accuracy` is the per-step accuracy of that
class against the true one (from the steps left until the episode's first success, failure = 0), the
"finer-grained metric" of §3.2.2 (null for Dreamer, which has no quantile head).

Success rate is averaged per task, then over tasks. Time to completion (§3.2.2: "the number of time
steps required to achieve success in each episode is averaged across all episodes and tasks"):
`mean_time_to_success` averages over ALL episodes, a failed episode entering with the time limit L
(max agent steps per episode: it needed at least that many); `mean_time_to_success_solved` averages
the successful episodes only (null when none succeeded).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from muse_common import metrics as M
from muse_common.files import atomic_save_figure, atomic_write_json, atomic_write_text, read_json_object
from muse_common.records import ADAPT_EPISODE, read_records
from muse_jax.agent_kinds import AGENT_KINDS

SIGNAL_NAMES = {"muse": "competence sum", "dreamer": "critic value"}

READINGS = ("steps_left", "from_start")
"""The time-to-success readings of the true quantiles: `competence.READINGS` (config
`model.competence_reading`), repeated here so this module stays free of JAX."""

REGULATION_EFFECT_KEYS = ("regulation_state_change", "regulation_action_change",
                          "regulation_ascent_state_change", "regulation_ascent_action_change",
                          "regulation_grad_norm", "regulation_actor_jacobian_norm", "regulation_actor_mean_abs")
"""Per-step size of what self-regulation changed and why (`regulation/gradient.py`), reported by regulated
policies, kept in episode records and averaged in results.json."""


def _num(x: float) -> float | None:
    """JSON has no nan: undefined metrics are written as null."""
    return None if x is None or not math.isfinite(x) else float(x)


def step_predictions(episodes: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(scores [S], labels [S]) over all steps of all episodes; label = the episode succeeded."""
    scores = [np.asarray(ep["signal"], float) for ep in episodes]
    labels = [np.full(len(s), bool(ep["success"])) for s, ep in zip(scores, episodes, strict=True)]
    if not scores:
        return np.zeros(0), np.zeros(0, bool)
    return np.concatenate(scores), np.concatenate(labels)


def psi1_predictions(episodes: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray] | None:
    """(psi_1 [S], labels [S]) over all steps, or None unless every episode recorded `psi1`."""
    if not episodes or not all("psi1" in ep for ep in episodes):
        return None
    p = [np.asarray(ep["psi1"], float) for ep in episodes]
    labels = [np.full(len(x), bool(ep["success"])) for x, ep in zip(p, episodes, strict=True)]
    return np.concatenate(p), np.concatenate(labels)


def raw_value_auroc(episodes: Sequence[dict[str, Any]]) -> float | None:
    """AUROC of Dreamer's raw critic value (records' `value`), beside the normalised signal: the
    normalisation value / max(1, return range) is monotone within one run but not across its episodes'
    steps if the scale moved, so both are reported. None when the records carry no raw value."""
    if not episodes or not all("value" in ep for ep in episodes):
        return None
    v = np.concatenate([np.asarray(ep["value"], float) for ep in episodes])
    y = np.concatenate([np.full(len(ep["value"]), bool(ep["success"])) for ep in episodes])
    return _num(M.auroc(v, y))


def regulation_effect(episodes: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Mean per-step size of what self-regulation changed (`regulation_*` record lists; null when the
    policy did not regulate): state/action change against the plain actor, and the part due to the ascent."""
    out: dict[str, float | None] = {}
    for k in REGULATION_EFFECT_KEYS:
        vals = [np.asarray(ep[k], float) for ep in episodes if k in ep]
        out[k] = _num(float(np.concatenate(vals).mean())) if vals and sum(v.size for v in vals) else None
    return out


def true_quantiles(time_to_success: int, steps: int, max_steps: int, n_quantiles: int,
                   reading: str = "steps_left") -> np.ndarray:
    """True success-quantile class per step [T] (0..N) of one episode with its first success at step
    `time_to_success`, all 0 for a failed episode (MUSE §3.1.1 labels, summed). `reading` (config
    `model.competence_reading`, `competence.steps_to_success`): `steps_left` counts the steps left until
    that success (0 at and after it); `from_start` takes the success step itself at every step."""
    if reading not in READINGS:
        raise ValueError(f"true_quantiles: reading={reading!r} is not one of {READINGS}.")
    t = np.arange(steps)
    if time_to_success < 0:
        return np.zeros(steps, np.int64)
    left = np.full(steps, time_to_success) if reading == "from_start" else np.maximum(time_to_success - t, 0)
    i = np.arange(1, n_quantiles + 1)
    thresholds = (n_quantiles + 1 - i) * max_steps / n_quantiles
    return (left[:, None] <= thresholds[None]).sum(-1)


def quantile_predictions(episodes: Sequence[dict[str, Any]], max_steps: int, n_quantiles: int,
                         reading: str = "steps_left") -> tuple[np.ndarray, np.ndarray]:
    """(predicted, true) quantile classes over all steps of the episodes that recorded `quantile`."""
    pred, true = [], []
    for ep in episodes:
        if "quantile" in ep:
            q = np.asarray(ep["quantile"], np.int64)
            pred.append(q)
            true.append(true_quantiles(int(ep["time_to_success"]), len(q), max_steps, n_quantiles, reading))
    if not pred:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(pred), np.concatenate(true)


def mean_time_to_completion(episodes: Sequence[dict[str, Any]], max_steps: int) -> float:
    """§3.2.2 time to completion: steps to the first success averaged over all episodes, failures = L."""
    if not episodes:
        return float("nan")
    return float(np.mean([ep["time_to_success"] if ep["success"] else max_steps for ep in episodes]))


def threshold_for(agent: str, scores: np.ndarray, n_quantiles: int) -> float:
    if agent == "muse":
        return n_quantiles / 2.0
    if agent == "dreamer":
        return M.median_threshold(scores)
    raise ValueError(f"agent '{agent}' is unknown; use one of {AGENT_KINDS}.")


def main_prediction(agent: str, episodes: Sequence[dict[str, Any]], n_quantiles: int, threshold: float | None = None,
                    ) -> tuple[np.ndarray, np.ndarray, float, str]:
    """(scores, labels, threshold, rule) of the main accuracy: MUSE psi_1 > 1/2 when the records have `psi1`,
    else the signal against `threshold_for` (or the given pooled `threshold`)."""
    if agent == "muse":
        p1 = psi1_predictions(episodes)
        if p1 is not None:
            return p1[0], p1[1], 0.5, "psi_1 > 1/2"
    scores, labels = step_predictions(episodes)
    t = threshold if threshold is not None else threshold_for(agent, scores, n_quantiles)
    rule = "value > median" if agent == "dreamer" else "sum psi > N/2 (records without psi1)"
    return scores, labels, t, rule


def _group_figures(agent: str, episodes: Sequence[dict[str, Any]], n_quantiles: int, max_steps: int,
                   threshold: float | None = None, reading: str = "steps_left") -> dict[str, Any]:
    scores, labels = step_predictions(episodes)
    succ = [bool(ep["success"]) for ep in episodes]
    tts = [int(ep["time_to_success"]) for ep in episodes]
    q_pred, q_true = quantile_predictions(episodes, max_steps, n_quantiles, reading)
    m_scores, m_labels, m_threshold, _ = main_prediction(agent, episodes, n_quantiles, threshold)
    return {
        "episodes": len(episodes),
        "success_rate": _num(M.success_rate(succ)),
        "mean_time_to_success": _num(mean_time_to_completion(episodes, max_steps)),
        "mean_time_to_success_solved": _num(M.mean_time_to_success(tts, succ)),
        "sa_accuracy": _num(M.accuracy(m_scores, m_labels, m_threshold)),
        "sa_accuracy_n_half": (_num(M.accuracy(scores, labels, n_quantiles / 2.0)) if agent == "muse" else None),
        "sa_auroc": _num(M.auroc(scores, labels)),
        "sa_quantile_accuracy": _num(float((q_pred == q_true).mean())) if q_pred.size else None,
        "sa_auroc_raw_value": raw_value_auroc(episodes),
    }


def summarize(agent: str, episodes: Sequence[dict[str, Any]], n_quantiles: int, max_steps: int,
              reading: str = "steps_left") -> dict[str, Any]:
    """results.json content: pooled self-awareness scores, per-task and mean success figures.

    `max_steps` is L in agent steps (the time a failed episode enters time to completion with);
    `reading` (`model.competence_reading`) is the time to success the true quantiles are taken from.
    """
    if agent not in AGENT_KINDS:
        raise ValueError(f"agent '{agent}' is unknown; use one of {AGENT_KINDS}.")
    tasks = list(dict.fromkeys(ep["task"] for ep in episodes))
    per_task = [{"task": t, **_group_figures(agent, [e for e in episodes if e["task"] == t], n_quantiles,
                                             max_steps, reading=reading)} for t in tasks]
    pooled = _group_figures(agent, episodes, n_quantiles, max_steps, reading=reading)
    rates = [t["success_rate"] for t in per_task if t["success_rate"] is not None]
    scores, _ = step_predictions(episodes)
    m_scores, _, threshold, rule = main_prediction(agent, episodes, n_quantiles) if scores.size else (
        scores, None, None, None)
    return {
        "agent": agent,
        "signal": SIGNAL_NAMES[agent],
        "sa_accuracy": pooled["sa_accuracy"],
        "sa_accuracy_rule": rule,
        "sa_accuracy_n_half": pooled["sa_accuracy_n_half"],
        "sa_auroc": pooled["sa_auroc"],
        "sa_auroc_raw_value": pooled["sa_auroc_raw_value"],
        "sa_quantile_accuracy": pooled["sa_quantile_accuracy"],
        "competence_reading": reading,
        "sa_outcome_classes": len({bool(ep["success"]) for ep in episodes}),
        "sa_by_episode_index": by_episode_index(agent, episodes, n_quantiles, max_steps, reading),
        "sa_threshold": _num(threshold) if threshold is not None else None,
        # share of steps the main rule counts as predicted successes (0 or 1: a constant prediction)
        "sa_predicted_success_share": _num(float((m_scores > threshold).mean())) if threshold is not None else None,
        "success_rate": _num(float(np.mean(rates))) if rates else None,
        "tasks_solved": sum(1 for t in per_task if (t["success_rate"] or 0) > 0),
        "tasks_solved_fraction": _num(sum(1 for t in per_task if (t["success_rate"] or 0) > 0) / len(per_task))
        if per_task else None,
        **regulation_effect(episodes),
        "mean_time_to_success": pooled["mean_time_to_success"],
        "mean_time_to_success_solved": pooled["mean_time_to_success_solved"],
        "max_steps": int(max_steps),
        "episodes": len(episodes),
        "steps": int(scores.size),
        "tasks": per_task,
    }


def self_awareness(agent: str, episodes: Sequence[dict[str, Any]], n_quantiles: int, max_steps: int,
                   prefix: str = "sa/", reading: str = "steps_left") -> dict[str, float | None]:
    """The self-awareness figures of a set of episode records as flat metrics (metrics.jsonl, TensorBoard):
    `auroc`, `accuracy` (MUSE psi_1 > 1/2, Dreamer value > median), `quantile_accuracy` (MUSE), Dreamer's
    `auroc_raw_value`, `episodes`, `successes`, `outcome_classes`, and `auroc/<task>`, `accuracy/<task>`
    per task. With one outcome class AUROC is undefined: null, and `outcome_classes` says 1. `reading`:
    `model.competence_reading`, the time to success the true quantiles are taken from."""
    if not episodes:
        return {}
    out: dict[str, float | None] = {}

    def put(group: Sequence[dict[str, Any]], suffix: str) -> None:
        g = _group_figures(agent, group, n_quantiles, max_steps, reading=reading)
        out[f"{prefix}auroc{suffix}"] = g["sa_auroc"]
        out[f"{prefix}accuracy{suffix}"] = g["sa_accuracy"]
        if agent == "muse":
            out[f"{prefix}quantile_accuracy{suffix}"] = g["sa_quantile_accuracy"]
        elif g["sa_auroc_raw_value"] is not None or not suffix:
            out[f"{prefix}auroc_raw_value{suffix}"] = g["sa_auroc_raw_value"]

    put(episodes, "")
    out[f"{prefix}episodes"] = float(len(episodes))
    out[f"{prefix}successes"] = float(sum(bool(ep["success"]) for ep in episodes))
    out[f"{prefix}outcome_classes"] = float(len({bool(ep["success"]) for ep in episodes}))
    for task in dict.fromkeys(ep["task"] for ep in episodes):
        put([ep for ep in episodes if ep["task"] == task], f"/{task}")
    return out


def by_episode_index(agent: str, episodes: Sequence[dict[str, Any]], n_quantiles: int, max_steps: int,
                     reading: str = "steps_left") -> list[dict[str, Any]]:
    """Self-awareness early vs late in adaptation: the records split at the middle episode index (each
    task's episodes 0..n/2-1, then n/2..n-1), AUROC / accuracy / success rate of each half."""
    idx = [int(ep.get("episode", 0)) for ep in episodes]
    if not idx:
        return []
    mid = (max(idx) + 1) // 2
    halves = [("early", [e for e, i in zip(episodes, idx, strict=True) if i < mid], 0, mid - 1),
              ("late", [e for e, i in zip(episodes, idx, strict=True) if i >= mid], mid, max(idx))]
    out = []
    for name, group, lo, hi in halves:
        if not group:
            continue
        g = _group_figures(agent, group, n_quantiles, max_steps, reading=reading)
        out.append({"half": name, "episode_index": [lo, hi], "episodes": len(group),
                    "success_rate": _num(float(np.mean([bool(e["success"]) for e in group]))),
                    "sa_auroc": g["sa_auroc"], "sa_accuracy": g["sa_accuracy"]})
    return out


ROWS = (("Accuracy", "sa_accuracy", True), ("Accuracy, sum psi > N/2 variant", "sa_accuracy_n_half", True),
        ("AUROC", "sa_auroc", False),
        ("Quantile accuracy", "sa_quantile_accuracy", True),
        ("Success rate (per episode, mean over tasks)", "success_rate", True),
        ("Tasks solved (at least one success)", "tasks_solved_fraction", True),
        ("Mean time to completion (failures = L)", "mean_time_to_success", False),
        ("Mean time to success (solved only)", "mean_time_to_success_solved", False))
"""Table 1's rows (accuracy, AUROC) plus the §3.2.2 quantile and self-regulation metrics."""

PAPER_TABLE1 = {"muse": {"sa_accuracy": 0.92, "sa_auroc": 0.95, "tasks_solved_fraction": "7/10"},
                "dreamer": {"sa_accuracy": 0.39, "sa_auroc": 0.63, "tasks_solved_fraction": "0/10"}}
"""MUSE Table 1, and §3.2.3's "solved 7 of the 10 novel tasks (70%)" (Dreamer-v3: none) for `compare`.
The 70% is a share of tasks solved, not a per-episode success rate, which the paper does not report:
it sits in the tasks-solved row and the per-episode success row's paper cell stays empty."""


def _one_outcome(r: dict[str, Any]) -> str | None:
    """'all 5 episodes failed' / 'all 5 episodes solved' when every episode had the same outcome: the
    self-awareness metrics are then degenerate (AUROC undefined, accuracy a base rate)."""
    rates = [t.get("success_rate") for t in r.get("tasks", [])]
    n = r.get("episodes", 0)
    if rates and all(x == 0.0 for x in rates):
        return f"all {n} episodes failed"
    if rates and all(x == 1.0 for x in rates):
        return f"all {n} episodes solved"
    return None


def _cell(r: dict[str, Any], key: str, pct: bool) -> str:
    if key in ("sa_quantile_accuracy", "sa_accuracy_n_half") and r.get("agent") == "dreamer":
        return "n/a (no quantile head)"
    if key == "tasks_solved_fraction" and r.get("tasks"):
        return f"{r.get('tasks_solved', 0)}/{len(r['tasks'])}"
    text = _fmt(r.get(key), pct)
    one = _one_outcome(r)
    if one and key == "sa_accuracy":
        share = "fail" if "failed" in one else "succeed"
        text += f" ({one}: one outcome class, so accuracy is only the share of steps predicted to {share})"
    elif one and key == "sa_auroc":
        text += f" ({one}: undefined with one outcome class)"
    elif key == "sa_accuracy" and r.get("sa_predicted_success_share") in (0.0, 1.0):
        side = "fail" if r["sa_predicted_success_share"] == 0.0 else "succeed"
        text += (f" (every step predicted to {side} at threshold {_fmt(r.get('sa_threshold'))}: accuracy is only the "
                 f"share of steps that did {'fail' if side == 'fail' else 'succeed'})")
    return text


def table1_side_by_side(results: Sequence[dict[str, Any]]) -> str:
    """Table 1 with one column per adapt output (MUSE and Dreamer side by side) and the paper's values."""
    names = [_name(r) for r in results]
    lines = ["| Metric | " + " | ".join(names) + " | paper MUSE | paper Dreamer-v3 |",
             "| --- |" + " --- |" * (len(results) + 2)]
    for metric, key, pct in ROWS:
        paper = [_paper_cell(PAPER_TABLE1[a].get(key), pct) for a in AGENT_KINDS]
        lines.append(f"| {metric} | " + " | ".join(_cell(r, key, pct) for r in results) + " | "
                     + " | ".join(paper) + " |")
    lines.append("| Episodes (tasks) | " + " | ".join(f"{r['episodes']} ({len(r['tasks'])})" for r in results)
                 + " | 200 (10) | 200 (10) |")
    return "\n".join(lines) + "\n"


def _paper_cell(x: float | str | None, pct: bool) -> str:
    """The paper's value as printed there ("7/10" stays a count), empty where the paper has none."""
    if x is None:
        return ""
    return x if isinstance(x, str) else _fmt(x, pct)


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.0f}%" if pct else f"{x:.2f}"


def table_markdown(results: Sequence[dict[str, Any]]) -> str:
    """Table 1 layout (Method | Metric | Value) plus success and time to success, then per task."""
    lines = ["| Method | Metric | Value |", "| --- | --- | --- |"]
    for metric, key, pct in ROWS:
        for r in results:
            lines.append(f"| {_name(r)} | {metric} | {_cell(r, key, pct)} |")
    lines += ["", "| Task | " + " | ".join(f"{_name(r)} success | {_name(r)} steps" for r in results) + " |",
              "| --- |" + " --- | --- |" * len(results)]
    tasks = list(dict.fromkeys(t["task"] for r in results for t in r["tasks"]))
    for task in tasks:
        cells = []
        for r in results:
            t = next((x for x in r["tasks"] if x["task"] == task), {})
            cells += [_fmt(t.get("success_rate"), True), _fmt(t.get("mean_time_to_success"))]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _name(r: dict[str, Any]) -> str:
    return {"muse": "MUSE", "dreamer": "Dreamer-v3"}.get(r["agent"], r["agent"])


def plot_time_to_success(results: Sequence[dict[str, Any]], path: str | Path, max_steps: int) -> Path:
    """Figure 6: mean steps to solve each novel task (solved episodes), one panel per agent; unsolved
    tasks marked; the dashed tick is the time to completion with failures entering as L."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, r in zip(axes[0], results, strict=True):
        names = [t["task"].removesuffix("-v3") for t in r["tasks"]]
        vals = [t.get("mean_time_to_success_solved") for t in r["tasks"]]
        y = np.arange(len(names))
        ax.barh(y, [v if v is not None else 0 for v in vals], color="tab:blue")
        ax.scatter([t["mean_time_to_success"] or 0 for t in r["tasks"]], y, marker="|", s=200, color="black",
                   label="all episodes, failures = L")
        for i, v in enumerate(vals):
            if v is None:
                ax.text(max_steps * 0.02, i, "not solved", va="center", fontsize=8, color="tab:red")
        ax.set_yticks(y, names, fontsize=8)
        ax.set_xlim(0, max_steps)
        ax.set_xlabel("time steps to success")
        ax.set_title(_name(r))
    fig.tight_layout()
    return atomic_save_figure(fig, path)


def plot_quantiles(episodes: Sequence[dict[str, Any]], path: str | Path, max_steps: int, n_quantiles: int,
                   title: str, reading: str = "steps_left") -> Path:
    """Confusion matrix of predicted vs true success-quantile class over all steps (the §3.2.2 finer metric)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pred, true = quantile_predictions(episodes, max_steps, n_quantiles, reading)
    n = n_quantiles + 1
    cm = np.zeros((n, n), np.int64)
    np.add.at(cm, (true, pred), 1)
    rows = cm / np.maximum(cm.sum(1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(4.5, 4))
    im = ax.imshow(rows, vmin=0, vmax=1, cmap="Blues")
    for i in range(n):
        for j in range(n):
            if cm[i, j]:
                ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=7)
    ax.set_xlabel("predicted quantile class (0 = failure, N = first quantile)")
    ax.set_ylabel("true quantile class")
    acc = float((pred == true).mean()) if pred.size else float("nan")
    ax.set_title(f"{title}: per-step accuracy {acc:.0%}" if pred.size else f"{title}: no quantile predictions")
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return atomic_save_figure(fig, path)


def write_outputs(out: str | Path, agent: str, episodes: Sequence[dict[str, Any]], n_quantiles: int,
                  max_steps: int, reading: str = "steps_left") -> dict[str, Any]:
    """results.json, roc.png (Figure 5), time_to_success.png (Figure 6), table.md (Table 1) and, for
    MUSE, quantiles.png (predicted vs true success quantile). `max_steps` is L in agent steps; `reading`
    is `model.competence_reading` (the true quantiles' time to success)."""
    out = Path(out)
    res = summarize(agent, episodes, n_quantiles, max_steps, reading)
    atomic_write_json(out / "results.json", res)
    scores, labels = step_predictions(episodes)
    M.plot_roc({_name(res): (scores, labels)}, out / "roc.png", title="Self-awareness on novel tasks")
    plot_time_to_success([res], out / "time_to_success.png", max_steps)
    if res["sa_quantile_accuracy"] is not None:
        plot_quantiles(episodes, out / "quantiles.png", max_steps, n_quantiles, _name(res), reading)
    atomic_write_text(out / "table.md", table_markdown([res]))
    return res


def load_results(run: str | Path) -> dict[str, Any]:
    path = Path(run) / "results.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; run `muse-wm adapt ... --logdir {run}` first.")
    return read_json_object(path, "an adapt results file", f"rerun `muse-wm adapt ... --logdir {run}` to rewrite it.")


def compare(runs: Sequence[str | Path], out: str | Path | None = None) -> str:
    """Table 1 with the adapt outputs side by side (one column each, the paper's values last), then the
    full per-agent table; with `out`, a combined ROC plot as well."""
    results = [load_results(r) for r in runs]
    if out is not None:
        curves = {}
        for run, r in zip(runs, results, strict=True):
            eps = read_records(Path(run) / "episodes.jsonl", ADAPT_EPISODE)
            curves[f"{_name(r)} ({Path(run).name})"] = step_predictions(eps)
        M.plot_roc(curves, out, title="Self-awareness on novel tasks")
    return table1_side_by_side(results) + "\n" + table_markdown(results)
