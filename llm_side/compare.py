"""`muse-llm compare`: MUSE-LLM's Tables 3 and 4 (paper 000 §4.2) - ReAct, Reflexion and MUSE on the
same test episodes.

    muse-llm compare --config configs/llm/alfworld-compare.yaml --out runs/compare [--limit 5]

Every agent runs the same tasks, the same episode count (`adapt_episodes + test_episodes`, 5 + 5 in the
paper), the same per-episode seeds, step limit and model, each into OUT/<agent>/ as `muse-llm run`
would run it (one RunSpec per agent, built and run by run_spec; each resumes, and an option an agent
does not have is refused before any agent starts). The tables are computed from those folders, and
refused if the folders do not hold identical (task, episode, seed) sets and settings.

Columns, as in Tables 3-4:
  - "Additional adaptation": the test episodes after the first `adapt_episodes` of each task;
  - "Pre-trained model": the first `test_episodes` episodes of each task. In the paper this is a second
    run with test episodes only; it is the same thing here: before episode `adapt_episodes` nothing has
    been adapted (MUSE refits M_sa after its last adaptation episode; reflections grow across test
    episodes in both conditions) and the per-episode seeds are the same, so those episodes are the
    no-adaptation test episodes. Shown only when test_episodes <= adapt_episodes.
Time to success counts a failed episode as 100 steps (§4.2.2); a column with no success says so.

The trained MUSE of Algorithm 3: `--trained OUT` points MUSE at what `muse-llm alfworld-pipeline --out OUT`
trained: the LoRA-SFT actor/world model (OUT/actor_sft/merged), the DPO'd reflection model
(OUT/reflection_dpo/merged) and the self-awareness model M_sa (OUT/msa), all three required. ReAct and
Reflexion keep the base `--model`, as in the paper. Without `--trained`, MUSE runs the base actor and
reflection model (with whatever `muse:msa=DIR` names); the tables then say so: a "MUSE parts" line names
the actor, reflection model and M_sa every MUSE episode used.

Reading of the baselines (docs/llm/readings.md). Paper 000 says of Reflexion "our implementation uses
distinct LLMs fine-tuned for each respective task". Our default reads it as MUSE's own models (its actor
and reflection model are distinct fine-tuned LLMs) and runs ReAct and Reflexion on the base `--model`.
The other reading, Reflexion with the same fine-tuned actor and reflection model as MUSE (and no M_sa), is
`--reflexion-trained` (with `--trained`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_side import registry
from llm_side.harness.summary import TIME_PENALTY
from llm_side.run_settings import add_task_flags, load_settings
from llm_side.run_spec import (
    RunSpec,
    UsageError,
    build_spec,
    execute,
    outcome_line,
    parse_options,
    read_run_file,
    run_command,
)
from muse_common import metrics
from muse_common.arg_parser import ArgumentParser, path_arg

AGENTS = ("react", "reflexion", "muse")
KEYS = ("env", "split", "tasks", "limit", "max_steps", "model", "seed", "adapt_episodes", "test_episodes",
        "agents", "env_opt", "agent_opt", "trained", "reflexion_trained")
TRAINED_PARTS = (  # (muse option, folder under the pipeline's OUT, spec prefix, the stage that writes it)
    ("actor_model", "actor_sft/merged", "hf:", "sft"),
    ("reflection_model", "reflection_dpo/merged", "hf:", "dpo"),
    ("msa", "msa", "", "train-sa"),
)


def trained_base(metrics: dict[str, Any]) -> str | None:
    """The `--model` spec a trained part was fine-tuned from: its recorded `base_model`, else read off its
    base folder (a packaged model's cache folder is named '<model>-<sha>'; hf:DIR is the folder)."""
    if metrics.get("base_model"):
        return str(metrics["base_model"])
    base = metrics.get("base")
    if not base:
        return None
    from llm_side.backends.models import MODELS

    name = Path(str(base)).name
    for model in MODELS.values():
        if name == f"{model.name}-{model.sha256[:16]}":
            return model.name
    return f"hf:{base}"


def check_trained_base(root: Path, model: str) -> None:
    """Refuse trained parts fine-tuned from another base than `--model` (ReAct and Reflexion run `--model`:
    a MUSE on another base would not be like for like), in one line."""
    for sub in ("actor_sft", "reflection_dpo"):
        path = root / sub / "metrics.json"
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        base = trained_base(metrics if isinstance(metrics, dict) else {})
        if base is not None and base.strip() != model.strip():
            raise CompareError(f"--trained {root}: {sub} was fine-tuned from '{base}', not from --model '{model}'; "
                               f"pass --model {base} (ReAct and Reflexion must run the base the parts share)")


def trained_options(pipeline_out: str | Path, model: str | None = None) -> dict[str, str]:
    """MUSE's options for the models Algorithm 3 trained into `pipeline_out`; every part is required (the
    reflection model unless its DPO stage was skipped for want of pairs: then the base reflects). With
    `model`, the parts must have been fine-tuned from it."""
    root = Path(pipeline_out).expanduser()
    if model is not None:
        check_trained_base(root, model)
    opts = {}
    for key, sub, prefix, stage in TRAINED_PARTS:
        folder = root / sub
        marker = folder / ("msa_meta.json" if key == "msa" else "config.json")
        if key == "reflection_model" and _dpo_skipped(root):
            continue
        if not marker.is_file():
            raise CompareError(f"--trained {root}: no {sub} (trained by `muse-llm alfworld-pipeline --out {root} "
                               f"--stage {stage}`); run that stage first or leave --trained out for the base MUSE")
        opts[key] = f"{prefix}{folder}"
    return opts


def _dpo_skipped(root: Path) -> bool:
    """True when the pipeline's DPO stage finished without training (no preference pair)."""
    try:
        return bool(json.loads((root / "reflection_dpo" / "metrics.json").read_text()).get("skipped"))
    except (OSError, ValueError, AttributeError):
        return False


def muse_parts(records: list[dict[str, Any]]) -> str:
    """Which models MUSE's episodes used (trained or base), from the records."""
    def one(key: str) -> str:
        values = sorted({str(r.get(key)) for r in records if r.get(key) is not None}) or ["not recorded"]
        return ", ".join(values)
    msa = sorted({str(r.get("msa_source") or "untrained") for r in records}) or ["not recorded"]
    return (f"MUSE parts: actor {one('actor_model')}; reflection model {one('reflection_model')}; "
            f"M_sa {', '.join(msa)}")


class CompareError(UsageError):
    """Bad input or runs that are not like for like: one line on stderr, exit 2."""


RUN_SETTINGS = ("env", "split", "tasks", "limit", "max_steps", "model", "seed", "env_opt")
"""The compare settings every agent's run shares."""


def agent_specs(cfg: dict[str, Any]) -> dict[str, RunSpec]:
    """One RunSpec per compared agent, all checked before any runs: identical settings for every agent
    (`adapt_episodes + test_episodes` episodes); MUSE also gets `adapt_episodes` (its M_sa refit point),
    every agent its own `agent_opt[agent]`."""
    episodes = int(cfg["adapt_episodes"]) + int(cfg["test_episodes"])
    specs = {}
    for agent in cfg["agents"]:
        opts = dict(cfg["agent_opt"].get(agent) or {})
        if agent == "muse":
            opts.setdefault("adapt_episodes", int(cfg["adapt_episodes"]))
        shared = {k: cfg.get(k) for k in RUN_SETTINGS}
        specs[agent] = build_spec({**shared, "agent": agent, "episodes": episodes, "agent_opt": opts})
    return specs


def _load(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from llm_side.harness.records import load_records

    run_file = folder / "run.json"
    if not run_file.is_file():
        raise CompareError(f"{folder} holds no run (no run.json); run `muse-llm compare` without --report-only first")
    info = read_run_file(run_file, "delete it and rerun `muse-llm compare` without --report-only to resume that "
                                   "agent's run with the settings given, or pass a different --out folder")
    return info, load_records(folder)


def check_like_for_like(runs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
    """Refuse runs that differ in settings or in the (task, episode, seed) episodes they hold."""
    names = list(runs)
    ref_info, ref_recs = runs[names[0]]
    ref_eps = sorted((str(r["task"]), int(r["episode"]), r.get("seed")) for r in ref_recs)
    for name in names[1:]:
        info, recs = runs[name]
        for key in ("env", "model", "max_steps", "seed", "episodes", "tasks"):
            if info.get(key) != ref_info.get(key):
                raise CompareError(f"runs '{names[0]}' and '{name}' differ in {key} ({ref_info.get(key)!r} vs "
                                   f"{info.get(key)!r}); rerun them with the same settings")
        eps = sorted((str(r["task"]), int(r["episode"]), r.get("seed")) for r in recs)
        if eps != ref_eps:
            missing = sorted(set(ref_eps) ^ set(eps))[:3]
            raise CompareError(f"runs '{names[0]}' and '{name}' hold different episodes (e.g. {missing}); "
                               "finish both runs (rerun the same command) before comparing")


def window(records: list[dict[str, Any]], first: int, count: int) -> list[dict[str, Any]]:
    return [r for r in records if first <= int(r["episode"]) < first + count]


def figures(records: list[dict[str, Any]]) -> tuple[str, str]:
    """(success rate %, time to success) of a window, in words when degenerate."""
    if not records:
        return "n/a: no episodes", "n/a: no episodes"
    succ = [bool(r["success"]) for r in records]
    lo, hi = metrics.wilson_interval(sum(succ), len(succ))
    rate = f"{100 * metrics.success_rate(succ):.0f}% ({sum(succ)}/{len(succ)}; 95% CI {100 * lo:.0f}-{100 * hi:.0f})"
    if not any(succ):
        return rate, "n/a: no episode succeeded"
    steps = [int(r["steps"]) for r in records]
    return rate, f"{metrics.mean_time_to_success(steps, succ, penalty=TIME_PENALTY):.1f}"


def self_awareness(records: list[dict[str, Any]]) -> str:
    """Table 2's figures over the test chunks (chunk-wise M_sa predictions vs the episode outcome)."""
    scores, labels = [], []
    for r in records:
        for s in r.get("chunk_competence") or []:
            scores.append(float(s))
            labels.append(bool(r["success"]))
    if not scores:
        return "no M_sa predictions recorded"
    if len(set(labels)) == 1:
        return (f"{len(scores)} chunks, one outcome class (all {'succeeded' if labels[0] else 'failed'}): AUROC "
                f"undefined, accuracy {metrics.accuracy(scores, labels, 0.5):.3f}")
    return (f"{len(scores)} chunks: AUROC {metrics.auroc(scores, labels):.3f}, "
            f"accuracy {metrics.accuracy(scores, labels, 0.5):.3f}")


def paired(runs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]], first: int, count: int) -> list[str]:
    """MUSE (else the first agent) against each other agent on the same (task, episode) test episodes: who
    won which, and the exact McNemar p-value of the difference."""
    names = list(runs)
    ref = "muse" if "muse" in runs else names[0]
    outcome = {n: {(str(r["task"]), int(r["episode"])): bool(r["success"]) for r in window(recs, first, count)}
               for n, (_, recs) in runs.items()}
    lines = []
    for other in (n for n in names if n != ref):
        keys = sorted(set(outcome[ref]) & set(outcome[other]))
        both = sum(outcome[ref][k] and outcome[other][k] for k in keys)
        only_ref = sum(outcome[ref][k] and not outcome[other][k] for k in keys)
        only_other = sum(outcome[other][k] and not outcome[ref][k] for k in keys)
        lines.append(f"- {ref} vs {other} ({len(keys)} paired episodes): both won {both}, only {ref} {only_ref}, "
                     f"only {other} {only_other}, neither {len(keys) - both - only_ref - only_other}; exact McNemar "
                     f"p = {metrics.mcnemar_exact(only_ref, only_other):.3g}")
    return lines


def tables(runs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]], adapt: int, test: int) -> str:
    """Markdown of Tables 3 and 4 (and MUSE's Table 2 line) for like-for-like runs."""
    check_like_for_like(runs)
    info = next(iter(runs.values()))[0]
    pre = test <= adapt
    head = "| Agent | " + ("Pre-trained model | " if pre else "") + "Additional adaptation |"
    rule = "| --- | " + ("--- | " if pre else "") + "--- |"
    t3, t4 = [head, rule], [head, rule]
    for name, (_, recs) in runs.items():
        cells = [figures(window(recs, 0, test))] if pre else []
        cells.append(figures(window(recs, adapt, test)))
        t3.append(f"| {name} | " + " | ".join(c[0] for c in cells) + " |")
        t4.append(f"| {name} | " + " | ".join(c[1] for c in cells) + " |")
    n_tasks = len({r["task"] for r in next(iter(runs.values()))[1]})
    setting = (f"{n_tasks} tasks of env {info.get('env')}, model {info.get('model')}, max steps "
               f"{info.get('max_steps') or 'env default'}, seed {info.get('seed')}; pre-trained = episodes 1-{test}, "
               f"adaptation = episodes {adapt + 1}-{adapt + test} of each task")
    out = [f"Same test episodes for every agent: {setting}.", "",
           "## Table 3: success rate on the test episodes (95% Wilson intervals)", "", *t3, "",
           f"## Table 4: time to success (failures count {TIME_PENALTY} steps)", "", *t4]
    if len(runs) > 1:
        out += ["", "## Paired comparison on the same test episodes (additional adaptation)", "",
                *paired(runs, adapt, test)]
    if "muse" in runs:
        recs = runs["muse"][1]
        out += ["", muse_parts(recs), "", "## Table 2: MUSE self-awareness on the test episodes", ""]
        if pre:
            out.append(f"- pre-trained: {self_awareness(window(recs, 0, test))}")
        out.append(f"- additional adaptation: {self_awareness(window(recs, adapt, test))}")
    return "\n".join(out) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="muse-llm compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="YAML of compare settings (configs/llm/alfworld-compare.yaml)")
    p.add_argument("--out", required=True, type=path_arg, help="folder; each agent runs into OUT/<agent>/")
    p.add_argument("--agents", help=f"comma-separated (default {','.join(AGENTS)})")
    add_task_flags(p, env_help="default alfworld")
    p.add_argument("--adapt-episodes", type=int, help="adaptation episodes per task (paper: 5)")
    p.add_argument("--test-episodes", type=int, help="test episodes per task (paper: 5)")
    p.add_argument("--env-opt", action="append", default=[], metavar="K=V", help="env option (repeatable)")
    p.add_argument("--agent-opt", action="append", default=[], metavar="AGENT:K=V",
                   help="option for one agent, e.g. muse:msa=runs/pipe/msa (repeatable)")
    p.add_argument("--trained", metavar="PIPELINE_OUT",
                   help="MUSE uses the actor, reflection model and M_sa that `muse-llm alfworld-pipeline --out "
                        "PIPELINE_OUT` trained (Algorithm 3); ReAct and Reflexion keep --model")
    p.add_argument("--reflexion-trained", action="store_true",
                   help="the other reading of paper 000's baselines: Reflexion also uses the fine-tuned actor and "
                        "reflection model of --trained (default: Reflexion runs the base --model)")
    p.add_argument("--report-only", action="store_true", help="only print the tables of existing runs")
    p.add_argument("--no-progress", action="store_true")
    return p


def settings_of(a: argparse.Namespace) -> dict[str, Any]:
    """The compare settings: the flags over `--config` over the paper's defaults."""
    cfg = {"env": "alfworld", "seed": 0, "adapt_episodes": 5, "test_episodes": 5, "agents": list(AGENTS),
           **load_settings(a.config, KEYS, "compare settings")}
    for key in ("env", "split", "tasks", "limit", "max_steps", "model", "seed", "adapt_episodes", "test_episodes"):
        if getattr(a, key) is not None:
            cfg[key] = getattr(a, key)
    agents = a.agents or cfg["agents"]
    cfg["agents"] = [x.strip() for x in agents.split(",") if x.strip()] if isinstance(agents, str) else list(agents)
    for key in ("adapt_episodes", "test_episodes"):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], int):
            raise CompareError(f"'{key}' must be an integer, got {cfg[key]!r}")
    if cfg["adapt_episodes"] < 0 or cfg["test_episodes"] < 1:
        raise CompareError("adapt_episodes must be >= 0 and test_episodes >= 1")
    cfg["env_opt"] = {**(cfg.get("env_opt") or {}), **parse_options(a.env_opt, "--env-opt")}
    agent_opt = {}
    for agent, opts in (cfg.get("agent_opt") or {}).items():
        if not isinstance(opts or {}, dict):
            raise CompareError("agent_opt: give each agent's options as a mapping (agent_opt: {muse: {msa: DIR}}); "
                               f"'{agent}' holds {opts!r}")
        agent_opt[agent] = dict(opts or {})
    for item in a.agent_opt:
        agent, sep, kv = item.partition(":")
        if not sep or "=" not in kv:
            raise CompareError(f"--agent-opt expects AGENT:KEY=VALUE (e.g. muse:msa=DIR), got '{item}'")
        agent_opt.setdefault(agent.strip(), {}).update(parse_options([kv.strip()], "--agent-opt"))
    stray = sorted(set(agent_opt) - set(cfg["agents"]) - set(registry.AGENTS))
    if stray:
        raise CompareError(f"agent_opt names agent(s) {stray} that are not compared; "
                           f"agents: {', '.join(cfg['agents'])}")
    if a.trained:
        cfg["trained"] = a.trained
    if cfg.get("trained"):
        from llm_side.run_spec import default_model

        model = str(cfg.get("model") or default_model())
        parts = trained_options(cfg["trained"], model)
        agent_opt["muse"] = {**parts, **agent_opt.get("muse", {})}
        if a.reflexion_trained or cfg.get("reflexion_trained"):
            models = {k: v for k, v in parts.items() if k in ("actor_model", "reflection_model")}
            agent_opt["reflexion"] = {**models, **agent_opt.get("reflexion", {})}
    elif a.reflexion_trained or cfg.get("reflexion_trained"):
        raise CompareError("--reflexion-trained needs --trained PIPELINE_OUT (the fine-tuned models to give Reflexion)")
    cfg["agent_opt"] = agent_opt
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    return run_command("compare", lambda: _compare(a))


def _compare(a: argparse.Namespace) -> int:
    cfg = settings_of(a)
    if not a.report_only:
        specs = agent_specs(cfg)  # every agent's options are checked before the first one runs
        for agent, spec in specs.items():
            summary = execute(spec, a.out / agent, progress=not a.no_progress)
            print(outcome_line(spec, summary, a.out / agent))
    runs = {agent: _load(a.out / agent) for agent in cfg["agents"]}
    print(tables(runs, int(cfg["adapt_episodes"]), int(cfg["test_episodes"])), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
