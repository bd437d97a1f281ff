"""`muse-llm report`: the paper-style tables of one or more run folders, and ROC plots.

Tables follow MUSE-LLM §4: success rate; time to success with a 100-step penalty for failures;
self-awareness accuracy (competence > threshold as a success prediction) and AUROC, where every
step's competence is scored against its episode's outcome.

Every row says what was run: model, backend and step limit come from the folder's run.json (written
by `muse-llm run`); env tables that pool records are made once per (model, backend, max steps, agent
options), never across them: runs of one agent with different options (e.g. Metagent-P's ablation rungs or
max_replans) are different settings. Degenerate figures are said in words: no time to success when no
episode succeeded (the 100-step penalty would be the only number), no AUROC/ROC when every episode had
one outcome, and a note when MUSE's M_sa was untrained.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_side.harness.records import EPISODES_FILE, load_records
from llm_side.harness.summary import TIME_PENALTY
from muse_common import metrics
from muse_common.files import RunFileError, read_json_object

Table = tuple[str, str]  # (title, markdown)


def load_run(folder: str | Path) -> list[dict[str, Any]]:
    """Records of a run folder; a clear error when it holds none. Records of episodes the run did not
    ask for (a task or episode index outside its run.json) are left out with a warning, so the report
    counts what summary.json counts."""
    folder = Path(folder)
    if not (folder / EPISODES_FILE).exists():
        raise FileNotFoundError(f"{folder} has no {EPISODES_FILE}: pass a folder written by `muse-llm run --out`.")
    records = load_records(folder)
    info = _run_file(folder)
    tasks, episodes = info.get("tasks"), info.get("episodes")
    if isinstance(tasks, list) and isinstance(episodes, int) and not isinstance(episodes, bool):
        wanted = {str(t) for t in tasks}
        inside = [r for r in records if str(r["task"]) in wanted and 0 <= int(r["episode"]) < episodes]
        if len(inside) != len(records):
            _warn(f"{folder / EPISODES_FILE}: {len(records) - len(inside)} record(s) of episodes outside the run "
                  f"({len(tasks)} task(s) x {episodes} episode(s) in its {RUN_FILE}) left out of the report")
        records = inside
    return records


RUN_FILE = "run.json"


def _warn(message: str) -> None:
    print(f"muse-llm: warning: {message}", file=sys.stderr)


_GARBLED: set[Path] = set()


def _run_file(folder: Path) -> dict[str, Any]:
    """The run.json of a folder ({} when it has none); one warning when it is not a JSON object."""
    path = folder / RUN_FILE
    if not path.exists():
        return {}
    try:
        return read_json_object(path, "a run settings file", "model, backend and max steps are shown as unknown "
                                "and every record is reported")
    except (OSError, RunFileError) as e:
        if path not in _GARBLED:
            _GARBLED.add(path)
            _warn(str(e) if isinstance(e, RunFileError) else f"{path} cannot be read ({e.strerror}); model, backend "
                  "and max steps are shown as unknown and every record is reported")
        return {}


def backend_of(model: str) -> str:
    """How a `--model` spec is served: an OpenAI-compatible server, or transformers in-process."""
    model = str(model or "")
    if model.startswith("openai:"):
        return "openai-server"
    if not model:
        return "unknown"
    return "transformers"


def run_settings(folder: str | Path) -> dict[str, Any]:
    """model, backend, max_steps and agent options of a run folder (from run.json; 'unknown' where it has
    none; options as sorted 'key=value' text, 'default options' when none were given)."""
    info = _run_file(Path(folder))
    model = str(info.get("model") or "")
    max_steps = info.get("max_steps")
    opts = info.get("agent_opt") if isinstance(info.get("agent_opt"), dict) else {}
    options = ", ".join(f"{k}={opts[k]}" for k in sorted(opts)) or "default options"
    return {"model": model or "unknown", "backend": backend_of(model),
            "max_steps": "env default" if max_steps is None and info else (max_steps or "unknown"),
            "agent_opt": options}


def competence_pairs(records: list[dict[str, Any]]) -> tuple[list[float], list[bool]]:
    """(per-step competence, its episode's success) over all steps that have a prediction."""
    scores, labels = [], []
    for r in records:
        for c in r.get("competence") or []:
            if c is not None and math.isfinite(c):  # NaN or inf: no prediction was made
                scores.append(float(c))
                labels.append(bool(r["success"]))
    return scores, labels


def sa_note(records: list[dict[str, Any]], scores: list[float], labels: list[bool]) -> str:
    """Why the self-awareness figures of a run carry little or no information, in words ('' if fine)."""
    notes = []
    if scores and len(set(labels)) == 1:
        outcome = "succeeded" if labels[0] else "failed"
        notes.append(f"one outcome class: all {len(records)} episodes {outcome}, so AUROC is undefined and "
                     f"accuracy only counts predictions of '{outcome}'")
    if any(r.get("agent") == "muse" and "msa_source" in r and not r["msa_source"] for r in records):
        notes.append("M_sa untrained (no --agent-opt msa=DIR): its scores (~0.5) carry no information; "
                     "train one with `muse-llm alfworld-pipeline --stage train-sa`")
    return "; ".join(notes)


def run_row(name: str, records: list[dict[str, Any]], threshold: float = 0.5,
            settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """One table row of figures for one run; `settings` are its run.json model/backend/max_steps."""
    successes = [bool(r["success"]) for r in records]
    steps = [int(r["steps"]) for r in records]
    scores, labels = competence_pairs(records)
    settings = settings or {"model": "unknown", "backend": "unknown", "max_steps": "unknown"}
    return {
        "run": name,
        "env": records[0]["env"] if records else "",
        "agent": records[0]["agent"] if records else "",
        **settings,
        "episodes": len(records),
        "successes": int(sum(successes)),
        "success_rate": metrics.success_rate(successes),
        "time_to_success": (metrics.mean_time_to_success(steps, successes, penalty=TIME_PENALTY)
                            if any(successes) else "n/a: no episode succeeded"),
        "sa_accuracy": metrics.accuracy(scores, labels, threshold) if scores else float("nan"),
        "auroc": metrics.auroc(scores, labels) if scores else float("nan"),
        "predictions": len(scores),
        "sa_note": sa_note(records, scores, labels),
    }


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "n/a" if v != v else f"{v:.3f}"
    return str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A GitHub markdown table of `rows`; `columns` is (key, header) pairs."""
    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(_fmt(r[k]) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def generic_tables(rows: Sequence[dict[str, Any]], threshold: float = 0.5) -> list[Table]:
    ident = [("run", "Run"), ("env", "Env"), ("agent", "Agent"), ("model", "Model"), ("backend", "Backend"),
             ("max_steps", "Max steps"), ("episodes", "Episodes")]
    tables = [
        ("Success rate", markdown_table(rows, [*ident, ("success_rate", "Success rate")])),
        (
            f"Time to success (failures count {TIME_PENALTY} steps)",
            markdown_table(rows, [*ident, ("time_to_success", "Steps")]),
        ),
    ]
    aware = [r for r in rows if r["predictions"]]
    if aware:
        md = markdown_table(
            aware, [*ident, ("predictions", "Predictions"), ("sa_accuracy", "Accuracy"), ("auroc", "AUROC")]
        )
        notes = "".join(f"\n\nNote ({r['run']}): {r['sa_note']}." for r in aware if r["sa_note"])
        tables.append((f"Self-awareness (threshold {threshold})", md + notes))
    return tables


def env_hook(env_name: str) -> Callable[[list[dict[str, Any]]], list[Table]] | None:
    """The env module's optional `report_tables(records)`; None when it has none or cannot load."""
    from llm_side import registry

    target = registry.ENVS.get(env_name)
    if target is None:
        return None
    try:
        module = importlib.import_module(target.split(":")[0])
    except ImportError:
        return None
    hook = getattr(module, "report_tables", None)
    return hook if callable(hook) else None


def _run_name(folder: Path, folders: Sequence[Path]) -> str:
    names = [f.resolve().name for f in folders]
    return folder.resolve().name if names.count(folder.resolve().name) == 1 else str(folder)


def report(folders: Sequence[str | Path], threshold: float = 0.5) -> tuple[list[Table], list[Path]]:
    """Tables for `folders` (generic ones, then each env's own) and the ROC plots written:
    DIR/roc.png per run with predictions, and roc_combined.png in the folders' common parent when
    several runs have them."""
    paths = [Path(f) for f in folders]
    runs = {_run_name(p, paths): (p, load_run(p)) for p in paths}
    settings = {name: run_settings(folder) for name, (folder, _) in runs.items()}
    rows = [run_row(name, recs, threshold, settings[name]) for name, (_, recs) in runs.items()]
    tables = generic_tables(rows, threshold)
    plots: list[Path] = []
    curves = {}
    for name, (folder, recs) in runs.items():
        scores, labels = competence_pairs(recs)
        if scores and len(set(labels)) > 1:  # one outcome class: no ROC curve exists (said in the table)
            curves[name] = (scores, labels)
            plots.append(metrics.plot_roc({name: (scores, labels)}, folder / "roc.png", title=f"ROC: {name}"))
    if len(curves) > 1:
        parent = Path(os.path.commonpath([str(p.resolve()) for p in paths]))
        plots.append(metrics.plot_roc(curves, parent / "roc_combined.png", title="Self-awareness ROC"))
    # env tables pool records across runs: only runs with the same model, backend, step limit and options
    groups: dict[tuple[str, str, str, str, str], list[dict[str, Any]]] = {}
    for name, (_, recs) in runs.items():
        key = settings[name]
        for r in recs:
            groups.setdefault((str(r["env"]), str(key["model"]), str(key["backend"]), str(key["max_steps"]),
                               str(key["agent_opt"])), []).append(r)
    several = len({k[1:] for k in groups}) > 1
    for (env_name, model, backend, max_steps, options), recs in groups.items():
        hook = env_hook(env_name)
        if hook is not None:
            suffix = f" [model {model}, {backend}, max steps {max_steps}, {options}]" if several else ""
            tables.extend((title + suffix, md) for title, md in hook(recs))
    return tables, plots


def render(tables: Sequence[Table]) -> str:
    return "\n\n".join(f"## {title}\n\n{md}" for title, md in tables) + "\n"
