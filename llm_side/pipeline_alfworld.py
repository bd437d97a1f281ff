"""Algorithm 3 of paper 000 on ALFWorld: pre-deployment training, then deployment on novel tasks.

Stages (each resumable, each writing atomically under OUT/):
  collect         Reflexion on the in-distribution tasks (140)           -> OUT/collect/episodes.jsonl
  train-sa        M_sa on the collected chunks                           -> OUT/msa/
  sft             LoRA-SFT of the Actor on successful episodes, in the run-time prompt format
                                                                         -> OUT/actor_sft/{adapter,merged}
  dpo             LoRA-DPO of the reflection model on reflection pairs   -> OUT/reflection_dpo/{adapter,merged}
  deploy          MUSE on the novel tasks (134): `adapt` adaptation episodes that refit M_sa's MLP
                  from replay, then `test` test episodes without updates -> OUT/deploy_adapt/
  deploy-noadapt  the same with test episodes only                       -> OUT/deploy_noadapt/
A finished stage is skipped on rerun (collect/deploy resume inside the runner; trained models are
written to a temp folder and renamed, their metrics file marking them done).
Deployment metrics over the test episodes only go to OUT/<deploy dir>/paper_metrics.json.
Collect and deploy are runs as `muse-llm run` makes them (a RunSpec built and run by run_spec: the same
option checks, a run.json in the stage's folder that a resume must match). `--agent-opt` keys are MUSE's
(a superset of Reflexion's): collect gives Reflexion the ones it declares, train-sa reads `embedder`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from llm_side import registry
from llm_side.backends import default_model
from llm_side.run_spec import RunSpec, build_spec, execute, make_agent, make_env, parse_options, run_command
from muse_common import metrics
from muse_common.arg_parser import ArgumentParser
from muse_common.files import atomic_write_json
from muse_common.settings import fields_of

STAGES = ("collect", "train-sa", "sft", "dpo", "deploy", "deploy-noadapt")


@dataclasses.dataclass
class PipelineConfig:
    """Settings of one Algorithm 3 run. Paper values: 50 steps, 5 adaptation + 5 test episodes."""

    out: Path
    model: str = dataclasses.field(default_factory=default_model)
    base: str | None = None  # transformers folder to fine-tune; default: the model's unpacked cache
    train_split: str = "eval_in_distribution"
    deploy_split: str = "eval_out_of_distribution"
    limit: int | None = None
    collect_episodes: int = 5
    adapt_episodes: int = 5
    test_episodes: int = 5
    max_steps: int = 50
    sa_epochs: int = 30
    sft_steps: int = 100
    dpo_steps: int = 50
    use_sft: bool = True
    use_dpo: bool = True
    dpo_unhelpful: bool = False  # named extra: fail->fail reflections as negatives (not in the paper)
    dpo_cross_task: bool = False  # named extra: rejected text from another task (not in the paper)
    seed: int = 0
    env_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    agent_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    progress: bool = True

    def spec(self, agent: str, split: str, episodes: int, **extra: Any) -> RunSpec:
        """The checked RunSpec of one stage's run: `agent` on ALFWorld's `split` with this config's model,
        limit, step limit, seed and env options, and the `--agent-opt` keys the agent declares, plus `extra`."""
        declared = fields_of(registry.agent_options(agent))
        opts = {k: v for k, v in self.agent_options.items() if k in declared}
        return build_spec({"env": "alfworld", "agent": agent, "model": self.model, "split": split,
                           "limit": self.limit, "episodes": episodes, "max_steps": self.max_steps, "seed": self.seed,
                           "env_opt": self.env_options, "agent_opt": {**opts, **extra}})

    def check(self, stage: str) -> None:
        """Refuse bad options and settings before any stage starts: against Reflexion's options when
        only collect runs, else MUSE's (every key some stage reads)."""
        agent = "reflexion" if stage == "collect" else "muse"
        build_spec({"env": "alfworld", "agent": agent, "model": self.model, "limit": self.limit,
                    "max_steps": self.max_steps, "seed": self.seed, "env_opt": self.env_options,
                    "agent_opt": self.agent_options})


def _records(folder: Path) -> list[dict[str, Any]]:
    """The stage's episode records through the one reader of their kind (checked, each (task, episode) once)."""
    from llm_side.harness.records import load_records

    return load_records(folder)


def _env(cfg: PipelineConfig) -> Any:
    return make_env("alfworld", cfg.env_options)


def stage_collect(cfg: PipelineConfig, llm: Any | None = None) -> dict[str, Any]:
    """Reflexion on the in-distribution tasks, `collect_episodes` each (Algorithm 3, PretrainModels)."""
    spec = cfg.spec("reflexion", cfg.train_split, cfg.collect_episodes)
    env = _env(cfg)
    try:
        return execute(spec, cfg.out / "collect", env=env, llm=llm, progress=cfg.progress)
    finally:
        env.close()


def _need(folder: Path, what: str) -> list[dict[str, Any]]:
    recs = _records(folder)
    if not recs:
        raise FileNotFoundError(f"{folder}/episodes.jsonl has no episodes; run `--stage {what}` first.")
    return recs


def stage_train_sa(cfg: PipelineConfig, embedder: Any | None = None) -> dict[str, Any]:
    from llm_side.backends import load_embedder
    from llm_side.training.self_awareness import METRICS_FILE, train_msa

    done = cfg.out / "msa" / METRICS_FILE
    if done.is_file():
        return json.loads(done.read_text())
    recs = _need(cfg.out / "collect", "collect")
    return train_msa(recs, embedder or load_embedder(cfg.agent_options.get("embedder")), cfg.out / "msa",
                     epochs=cfg.sa_epochs, seed=cfg.seed)


def base_folder(cfg: PipelineConfig) -> str:
    """The transformers folder to fine-tune: `base`, else the folder the backend loaded `model` from."""
    if cfg.base:
        return cfg.base
    from llm_side.backends import load_llm

    llm = load_llm(cfg.model)
    path = getattr(getattr(getattr(llm, "model", None), "config", None), "_name_or_path", None)
    if not path or not (Path(path) / "config.json").is_file():
        raise ValueError(f"cannot fine-tune model '{cfg.model}': it is not a local transformers model; "
                         "pass --base DIR (a save_pretrained folder).")
    return str(path)


def stage_sft(cfg: PipelineConfig) -> dict[str, Any]:
    from llm_side.training import sft

    out = cfg.out / "actor_sft"
    if (out / sft.METRICS_FILE).is_file():
        return json.loads((out / sft.METRICS_FILE).read_text())
    records = _need(cfg.out / "collect", "collect")
    base = base_folder(cfg)
    env = _env(cfg)  # the few-shot examples the actor sees at run time
    try:
        rows = sft.sft_examples(records, env, fits=_fits_window(base))
    finally:
        env.close()
    return sft.run_sft(base, rows, out, max_steps=cfg.sft_steps, seed=cfg.seed)


def _fits_window(base: str) -> Any:
    """`text -> bool`: within the context window of the transformers model in `base` (always True when
    its config names no window)."""
    from transformers import AutoConfig, AutoTokenizer

    window = getattr(AutoConfig.from_pretrained(base, local_files_only=True), "max_position_embeddings", None)
    tok = AutoTokenizer.from_pretrained(base, local_files_only=True)
    return lambda text: not window or len(tok(text, add_special_tokens=False)["input_ids"]) <= int(window)


def stage_dpo(cfg: PipelineConfig) -> dict[str, Any]:
    from llm_side.envs.alfworld_data import react_family
    from llm_side.training import dpo, sft

    out = cfg.out / "reflection_dpo"
    if (out / sft.METRICS_FILE).is_file():
        return json.loads((out / sft.METRICS_FILE).read_text())
    pairs = dpo.preference_pairs(_need(cfg.out / "collect", "collect"), group=react_family,
                                 include_unhelpful=cfg.dpo_unhelpful, cross_task=cfg.dpo_cross_task)
    return dpo.run_dpo(base_folder(cfg), pairs, out, max_steps=cfg.dpo_steps, seed=cfg.seed)


def stage_deploy(cfg: PipelineConfig, *, adapt: bool, llm: Any | None = None,
                 reflection_llm: Any | None = None) -> dict[str, Any]:
    """MUSE on the novel tasks; episodes [0, adapt) adapt M_sa, the next `test_episodes` are scored."""
    from llm_side.training import sft

    msa = cfg.out / "msa"
    if not (msa / "msa_meta.json").is_file():
        raise FileNotFoundError(f"no trained M_sa in {msa}; run `--stage train-sa` first.")
    actor_dir = cfg.out / "actor_sft" / sft.MERGED_DIR
    rx_dir = cfg.out / "reflection_dpo" / sft.MERGED_DIR
    options: dict[str, Any] = {"msa": str(msa), "adapt_episodes": cfg.adapt_episodes if adapt else 0}
    if llm is None and cfg.use_sft and actor_dir.is_dir():
        options["actor_model"] = f"hf:{actor_dir}"
    if reflection_llm is None and cfg.use_dpo and rx_dir.is_dir():
        options["reflection_model"] = f"hf:{rx_dir}"
    first_test = cfg.adapt_episodes if adapt else 0
    spec = cfg.spec("muse", cfg.deploy_split, first_test + cfg.test_episodes, **options)
    agent = make_agent(spec, llm)  # the base model is loaded only if it writes reflections
    if reflection_llm is not None:
        agent.reflection_llm = reflection_llm
    out = cfg.out / ("deploy_adapt" if adapt else "deploy_noadapt")
    env = _env(cfg)
    try:
        execute(spec, out, env=env, agent=agent, progress=cfg.progress)
    finally:
        env.close()
    result = test_metrics(_records(out), first_test)
    atomic_write_json(out / "paper_metrics.json", result)
    return result


def test_metrics(records: list[dict[str, Any]], first_test: int) -> dict[str, Any]:
    """Tables 2-4 figures over the test episodes: success rate, steps with the 100-step failure
    penalty, and chunk-wise self-awareness accuracy / AUROC against the episode outcome."""
    test = [r for r in records if int(r["episode"]) >= first_test]
    succ = [bool(r["success"]) for r in test]
    scores, labels = [], []
    for r in test:
        for s in r.get("chunk_competence") or []:
            scores.append(float(s))
            labels.append(bool(r["success"]))
    return {"episodes": len(test), "tasks": len({r["task"] for r in test}), "success_rate": metrics.success_rate(succ),
            "time_to_success_penalty100": metrics.mean_time_to_success([int(r["steps"]) for r in test], succ,
                                                                        penalty=100),
            "sa_chunks": len(scores), "sa_auroc": metrics.auroc(scores, labels),
            "sa_accuracy": metrics.accuracy(scores, labels, 0.5)}


def run_stage(cfg: PipelineConfig, stage: str) -> dict[str, Any]:
    """Run one stage (or 'all' in order) and return its result."""
    if stage == "all":
        return {s: run_stage(cfg, s) for s in STAGES}
    if stage == "collect":
        return stage_collect(cfg)
    if stage == "train-sa":
        return stage_train_sa(cfg)
    if stage == "sft":
        return stage_sft(cfg)
    if stage == "dpo":
        return stage_dpo(cfg)
    if stage == "deploy":
        return stage_deploy(cfg, adapt=True)
    if stage == "deploy-noadapt":
        return stage_deploy(cfg, adapt=False)
    raise ValueError(f"unknown pipeline stage '{stage}'; choose one of: {', '.join(STAGES)}, all.")


def build_parser() -> Any:
    import argparse

    p = ArgumentParser(prog="muse-llm alfworld-pipeline", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", default="all", choices=[*STAGES, "all"])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--model", default=None, help="model spec (default: env MUSE_LLM_MODEL, else the backends' default)")
    p.add_argument("--base", default=None, help="transformers folder to fine-tune (default: the model's cache)")
    p.add_argument("--limit", type=int, default=None, help="first N tasks of each split (smoke runs)")
    p.add_argument("--collect-episodes", type=int, default=5)
    p.add_argument("--adapt-episodes", type=int, default=5)
    p.add_argument("--test-episodes", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--sft-steps", type=int, default=100)
    p.add_argument("--dpo-steps", type=int, default=50)
    p.add_argument("--sa-epochs", type=int, default=30)
    p.add_argument("--dpo-unhelpful", action="store_true",
                   help="also count a reflection after which a failure stayed a failure as negative (not the paper's)")
    p.add_argument("--dpo-cross-task", action="store_true",
                   help="allow a rejected reflection from another task of the same type (not the paper's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env-opt", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--agent-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="MUSE option (collect passes Reflexion the ones it declares), repeatable")
    return p


def config_of(a: Any) -> PipelineConfig:
    """The PipelineConfig of the command line, its options checked for the stage(s) asked for."""
    cfg = PipelineConfig(out=a.out, model=a.model or default_model(), base=a.base, limit=a.limit,
                         collect_episodes=a.collect_episodes, adapt_episodes=a.adapt_episodes,
                         test_episodes=a.test_episodes, max_steps=a.max_steps, sft_steps=a.sft_steps,
                         dpo_steps=a.dpo_steps, sa_epochs=a.sa_epochs, seed=a.seed, dpo_unhelpful=a.dpo_unhelpful,
                         dpo_cross_task=a.dpo_cross_task, env_options=parse_options(a.env_opt, "--env-opt"),
                         agent_options=parse_options(a.agent_opt, "--agent-opt"))
    cfg.check(a.stage)
    return cfg


def main(argv: list[str] | None = None) -> int:
    """`python -m llm_side.pipeline_alfworld --stage S --out DIR [...]` (or `muse-llm alfworld-pipeline`)."""
    a = build_parser().parse_args(argv)

    def body() -> int:
        result = run_stage(config_of(a), a.stage)
        print(json.dumps(result, indent=2, default=str)[:4000])
        return 0

    return run_command("alfworld-pipeline", body)


if __name__ == "__main__":
    raise SystemExit(main())
