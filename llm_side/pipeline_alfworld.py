"""Algorithm 3 of paper 000 on ALFWorld: pre-deployment training, then deployment on novel tasks.

Stages (each resumable, each writing atomically under OUT/):
  collect         Reflexion on the in-distribution tasks (140)           -> OUT/collect/episodes.jsonl
                  + when no Reflexion episode won: ALFWorld's hand-coded expert on `expert_share` of those
                  games, one episode each, records marked "expert": true -> OUT/collect_expert/episodes.jsonl
  train-sa        M_sa on the collected chunks                           -> OUT/msa/
  sft             LoRA-SFT of the Actor on successful episodes, in the run-time prompt format, and its
                  measured effect (held-out NLL, greedy actions against the base)
                                                                         -> OUT/actor_sft/{adapter,merged}
  dpo             LoRA-DPO of the reflection model on reflection pairs   -> OUT/reflection_dpo/{adapter,merged}
                  (no pair: skipped, said in its metrics; deploy then reflects with the base model)
  deploy          MUSE on the novel tasks (134): `adapt` adaptation episodes that refit M_sa's MLP
                  from replay, then `test` test episodes without updates -> OUT/deploy_adapt/
  deploy-noadapt  the same with test episodes only                       -> OUT/deploy_noadapt/
A finished stage is skipped on rerun (collect/deploy resume inside the runner; trained models are
written to a temp folder and renamed, their metrics file marking them done).
Deployment metrics over the test episodes only go to OUT/<deploy dir>/paper_metrics.json.
Collect and deploy are runs as `muse-llm run` makes them (a RunSpec built and run by run_spec: the same
option checks, a run.json in the stage's folder that a resume must match). `--agent-opt` keys are MUSE's
(a superset of Reflexion's): collect gives Reflexion the ones it declares, train-sa reads `embedder`.

Expert seeding is a departure from the paper (which collects with Reflexion on strong LLMs): the packaged
small models win no collection episode, and without a success SFT has no data and M_sa one class. The
expert's episodes feed SFT and M_sa (next to the agent's own failures); DPO reads the agent's own
reflections only (docs/llm/alfworld_pipeline.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

from llm_side import registry
from llm_side.backends import default_model
from llm_side.harness.contracts import Decision, EpisodeOutcome, Observation
from llm_side.run_spec import (
    RunSpec,
    UsageError,
    build_spec,
    execute,
    make_agent,
    make_env,
    parse_options,
    run_command,
    select_tasks,
)
from muse_common import metrics
from muse_common.arg_parser import ArgumentParser, path_arg
from muse_common.files import atomic_write_json, read_json_object
from muse_common.settings import fields_of

STAGES = ("collect", "train-sa", "sft", "dpo", "deploy", "deploy-noadapt")
EXPERT_AGENT = "alfworld-expert"
"""The `agent` of the expert's seed records (OUT/collect_expert)."""


@dataclasses.dataclass
class PipelineConfig:
    """Settings of one Algorithm 3 run. Paper values: 50 steps, 5 adaptation + 5 test episodes."""

    out: Path
    model: str = dataclasses.field(default_factory=default_model)
    base: str | None = None  # transformers folder to fine-tune; default: the model's unpacked cache
    train_split: str = "eval_in_distribution"
    deploy_split: str = "eval_out_of_distribution"
    limit: int | None = None
    train_games: int | None = None  # collect on N train games drawn across the six task types (`games_across_types`)
    collect_episodes: int = 5
    adapt_episodes: int = 5
    test_episodes: int = 5
    max_steps: int = 50
    sa_epochs: int = 30
    sa_task_input: bool = True  # False: M_sa without its task input, a named variant (not the paper's)
    sft_steps: int = 60
    dpo_steps: int = 50
    expert_share: float = 0.25  # share of train games the expert plays when the agent won none (0 = never)
    sft_rows_per_game: int = 8  # SFT rows kept per successful episode, evenly spaced over its steps
    sft_row_tokens: int = 2048  # longest SFT row (a 2-shot head is 1110-1566 Qwen tokens); longer ones lose old steps
    sft_lr: float = 1e-3
    lora_rank: int = 8
    train_dtype: str = "float32"  # the base's weights in SFT and DPO (`sft.TRAIN_DTYPES`)
    sft_heldout: int = 4  # rows held out to measure the trained actor against the base
    use_sft: bool = True
    use_dpo: bool = True
    dpo_unhelpful: bool = False  # named extra: fail->fail reflections as negatives (not in the paper)
    dpo_cross_task: bool = False  # named extra: rejected text from another task (not in the paper)
    seed: int = 0
    env_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    agent_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    progress: bool = True

    def spec(self, agent: str, split: str, episodes: int, tasks: list[str] | None = None, **extra: Any) -> RunSpec:
        """The checked RunSpec of one stage's run: `agent` on ALFWorld's `split` (or on `tasks` of it) with this
        config's model, limit, step limit, seed and env options, and the `--agent-opt` keys the agent declares,
        plus `extra`."""
        declared = fields_of(registry.agent_options(agent))
        opts = {k: v for k, v in self.agent_options.items() if k in declared}
        return build_spec({"env": "alfworld", "agent": agent, "model": self.model, "split": split,
                           "tasks": tasks, "limit": None if tasks else self.limit, "episodes": episodes,
                           "max_steps": self.max_steps, "seed": self.seed, "env_opt": self.env_options,
                           "agent_opt": {**opts, **extra}})

    def check(self, stage: str) -> None:
        """Refuse bad options and settings before any stage starts: against Reflexion's options when
        only collect runs, else MUSE's (every key some stage reads)."""
        if self.train_games is not None and self.train_games < 1:
            raise UsageError(f"--train-games must be >= 1, got {self.train_games}")
        agent = "reflexion" if stage == "collect" else "muse"
        build_spec({"env": "alfworld", "agent": agent, "model": self.model, "limit": self.limit,
                    "max_steps": self.max_steps, "seed": self.seed, "env_opt": self.env_options,
                    "agent_opt": self.agent_options})


def _records(folder: Path) -> list[dict[str, Any]]:
    """The stage's episode records through the one reader of their kind (checked, each (task, episode) once)."""
    from llm_side.harness.records import load_records

    return load_records(folder)


def _env(cfg: PipelineConfig, expert: bool = False) -> Any:
    """The ALFWorld env of every stage (with `expert`: the hand-coded expert built too)."""
    return make_env("alfworld", {**cfg.env_options, "expert": True} if expert else cfg.env_options)


class ExpertActor:
    """ALFWorld's hand-coded expert behind the `Agent` contract (env made with expert=true): plays the
    expert's next action each step, keeps no memory, marks its records `expert: true`."""

    name = EXPERT_AGENT

    def __init__(self) -> None:
        self._env: Any = None

    def begin_episode(self, obs: Observation, *, task_id: str, episode: int, env: Any) -> None:
        self._env = env

    def act(self, observation: str, admissible_actions: list[str] | None) -> Decision:
        return Decision(action=self._env.expert_action() or "look")

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        self._env = None

    def memory(self) -> dict[str, Any]:
        return {}

    def load_memory(self, memory: dict[str, Any]) -> None:
        return None

    def episode_extras(self) -> dict[str, Any]:
        return {"expert": True}


def expert_games(task_ids: list[str], share: float, seed: int) -> list[str]:
    """The `share` of `task_ids` the expert plays (at least one when share > 0), drawn with `seed`,
    in the split's order."""
    if share <= 0 or not task_ids:
        return []
    k = min(len(task_ids), max(1, math.ceil(share * len(task_ids))))
    chosen = set(random.Random(seed).sample(task_ids, k))
    return [t for t in task_ids if t in chosen]


def games_across_types(task_ids: list[str], n: int, seed: int) -> list[str]:
    """`n` of `task_ids` spread over ALFWorld's six task types: round-robin over the types (ReAct's order), each
    type's games drawn with random.Random(seed), returned in the split's order (the rule that drew the study's
    held-out games). Why not the first `n`: a split is sorted by game folder, so its first 10 games are all of
    one type (eval_in_distribution: 10 look_at_obj_in_light), and a collection on them trains the actor, M_sa
    and DPO on that type alone."""
    from llm_side.envs.alfworld_data import REACT_PREFIXES, react_family

    by_type: dict[str, list[str]] = {family: [] for family in REACT_PREFIXES.values()}
    for t in task_ids:
        by_type[react_family(t)].append(t)
    rng = random.Random(seed)
    queues = [rng.sample(games, len(games)) for games in by_type.values()]
    chosen: list[str] = []
    while len(chosen) < min(n, len(task_ids)):
        for queue in queues:
            if queue and len(chosen) < n:
                chosen.append(queue.pop(0))
    keep = set(chosen)
    return [t for t in task_ids if t in keep]


def stage_collect(cfg: PipelineConfig, llm: Any | None = None) -> dict[str, Any]:
    """Reflexion on the in-distribution tasks (all, the first `limit`, or `train_games` drawn across the task
    types), `collect_episodes` each (Algorithm 3, PretrainModels); then, when no Reflexion episode won, the
    expert seed (`collect_expert`)."""
    env = _env(cfg)
    try:
        tasks = (games_across_types(list(env.task_ids(cfg.train_split)), cfg.train_games, cfg.seed)
                 if cfg.train_games else None)
        spec = cfg.spec("reflexion", cfg.train_split, cfg.collect_episodes, tasks=tasks)
        summary = execute(spec, cfg.out / "collect", env=env, llm=llm, progress=cfg.progress)
        task_ids = select_tasks(env, spec.split, spec.tasks, spec.limit)
    finally:
        env.close()
    seeded = collect_expert(cfg, task_ids)
    return {**summary, "expert_seed": seeded} if seeded is not None else summary


def collect_expert(cfg: PipelineConfig, task_ids: list[str]) -> dict[str, Any] | None:
    """One expert episode on each of `expert_share` of the train games, when the agent's collection has
    no success (None when not needed or `expert_share` is 0); resumable like any run."""
    from llm_side.harness.runner import run_eval
    from llm_side.training.sft import log

    agent_wins = sum(bool(r["success"]) for r in _records(cfg.out / "collect"))
    games = expert_games(task_ids, cfg.expert_share, cfg.seed)
    if agent_wins or not games:
        return None
    log(f"collect: the agent won none of its episodes; seeding with ALFWorld's hand-coded expert on {len(games)} "
        f"of {len(task_ids)} train games (expert_share {cfg.expert_share}), records marked expert")
    env = _env(cfg, expert=True)
    try:
        return run_eval(env, ExpertActor(), env_name="alfworld", agent_name=EXPERT_AGENT, task_ids=games, episodes=1,
                        max_steps=cfg.max_steps, out_dir=cfg.out / "collect_expert", seed=cfg.seed,
                        progress=cfg.progress)
    finally:
        env.close()


def training_records(cfg: PipelineConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the agent's own collection records, the expert's seed records: [] when there was no seed)."""
    return _need(cfg.out / "collect", "collect"), _records(cfg.out / "collect_expert")


def _need(folder: Path, what: str) -> list[dict[str, Any]]:
    recs = _records(folder)
    if not recs:
        raise FileNotFoundError(f"{folder}/episodes.jsonl has no episodes; run `--stage {what}` first.")
    return recs


def finished_stage(metrics: Path, stage: str) -> dict[str, Any] | None:
    """The metrics file a finished training stage left (its mark of being done: a rerun skips the stage), or
    None when there is none. One line naming the file when it is not the JSON object the stage wrote."""
    if not metrics.is_file():
        return None
    return read_json_object(metrics, f"the metrics of a finished `{stage}` stage",
                            f"delete {metrics.parent} and rerun `--stage {stage}` to train it again")


def stage_train_sa(cfg: PipelineConfig, embedder: Any | None = None) -> dict[str, Any]:
    from llm_side.backends import load_embedder
    from llm_side.training.self_awareness import METRICS_FILE, leave_one_game_out, train_msa

    done = finished_stage(cfg.out / "msa" / METRICS_FILE, "train-sa")
    if done is not None:
        if done.get("task_input", True) != cfg.sa_task_input:
            kept, folder = ("with" if done.get("task_input", True) else "without"), cfg.out / "msa"
            raise UsageError(f"M_sa in {folder} was trained {kept} its task input, which this command does not ask "
                             f"for; {'drop' if kept == 'with' else 'add'} --sa-without-task to use it, or delete "
                             f"{folder} to retrain it")
        return done
    own, expert = training_records(cfg)
    embedder = embedder or load_embedder(cfg.agent_options.get("embedder"))
    # on the agent's own episodes only: the expert plays other games, which would make "won" a game label
    transfer = leave_one_game_out(own, embedder, epochs=cfg.sa_epochs, seed=cfg.seed)
    return train_msa(own + expert, embedder, cfg.out / "msa", epochs=cfg.sa_epochs, seed=cfg.seed,
                     task_input=cfg.sa_task_input, extra={"unseen_games": transfer})


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
    done = finished_stage(out / sft.METRICS_FILE, "sft")
    if done is not None:
        return done
    own, expert = training_records(cfg)
    base = base_folder(cfg)
    env = _env(cfg)  # the few-shot examples the actor sees at run time
    context = int(cfg.agent_options.get("context_tokens", 6000))  # the actor's prompt budget at run time
    fits = _fits_window(base, cfg.sft_row_tokens)
    try:  # each collection on its own: their (task, episode) numbers overlap, and memory is per run
        games = [sft.sft_examples(recs, env, context_tokens=context, fits=fits, per_episode=cfg.sft_rows_per_game,
                                  grouped=True) for recs in (own, expert)]
    finally:
        env.close()
    train, heldout, how = sft.hold_out([g for part in games for g in part], cfg.sft_heldout)
    metrics = sft.run_sft(base, train, out, max_steps=cfg.sft_steps, lr=cfg.sft_lr, lora_r=cfg.lora_rank,
                          seed=cfg.seed, heldout=heldout, base_model=cfg.model, dtype=cfg.train_dtype,
                          extra={"rows_expert": sum(len(g) for g in games[1]), "heldout_from": how,
                                 "rows_per_game": cfg.sft_rows_per_game, "row_tokens": cfg.sft_row_tokens})
    return metrics


def _fits_window(base: str, row_tokens: int | None = None) -> Any:
    """`text -> bool`: within the context window of the transformers model in `base` (always True when
    its config names no window) and within `row_tokens`."""
    from transformers import AutoConfig, AutoTokenizer

    window = getattr(AutoConfig.from_pretrained(base, local_files_only=True), "max_position_embeddings", None)
    limit = min(int(window or 10**9), int(row_tokens or 10**9))
    tok = AutoTokenizer.from_pretrained(base, local_files_only=True)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"]) <= limit


def stage_dpo(cfg: PipelineConfig) -> dict[str, Any]:
    from llm_side.envs.alfworld_data import react_family
    from llm_side.training import dpo, sft

    out = cfg.out / "reflection_dpo"
    done = finished_stage(out / sft.METRICS_FILE, "dpo")
    if done is not None:
        return done
    own, _ = training_records(cfg)  # the agent's own reflections: the expert writes none
    pairs = dpo.preference_pairs(own, group=react_family, include_unhelpful=cfg.dpo_unhelpful,
                                 cross_task=cfg.dpo_cross_task)
    if not pairs:  # no fail->success turn of the agent's: nothing to prefer; deploy reflects with the base model
        why = ("no DPO pair: no task of the agent's collection has a reflection after which a failure turned "
               "into success and one after which a success turned into failure")
        sft.log(f"DPO: skipped, {why}; deploy uses the base model for reflections")
        metrics = {"skipped": why, "pairs": 0, "base": base_folder(cfg), "base_model": cfg.model}
        atomic_write_json(out / sft.METRICS_FILE, metrics)
        return metrics
    return dpo.run_dpo(base_folder(cfg), pairs, out, max_steps=cfg.dpo_steps, lora_r=cfg.lora_rank, seed=cfg.seed,
                       base_model=cfg.model, dtype=cfg.train_dtype)


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
    p.add_argument("--out", required=True, type=path_arg)
    p.add_argument("--model", default=None, help="model spec (default: env MUSE_LLM_MODEL, else the backends' default)")
    p.add_argument("--base", default=None, help="transformers folder to fine-tune (default: the model's cache)")
    p.add_argument("--limit", type=int, default=None,
                   help="first N tasks of each split (smoke runs; on ALFWorld the first games are all of one type)")
    p.add_argument("--train-games", type=int, default=None,
                   help="collect on N train games drawn across the six task types (round-robin, --seed), instead "
                        "of the split's first --limit")
    p.add_argument("--collect-episodes", type=int, default=5)
    p.add_argument("--adapt-episodes", type=int, default=5)
    p.add_argument("--test-episodes", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--sft-steps", type=int, default=60, help="SFT optimizer steps (batch 2)")
    p.add_argument("--sft-lr", type=float, default=1e-3, help="SFT learning rate (LoRA)")
    p.add_argument("--lora-rank", type=int, default=8, help="LoRA rank of SFT and DPO")
    p.add_argument("--train-dtype", default="float32", choices=["float32", "bfloat16"],
                   help="the base model's weights in SFT and DPO (LoRA weights train in float32); bfloat16 is "
                        "~4x faster on a CPU with AMX and halves the memory")
    p.add_argument("--sft-rows-per-game", type=int, default=8,
                   help="SFT rows kept per successful episode, evenly spaced over its steps")
    p.add_argument("--sft-row-tokens", type=int, default=2048,
                   help="longest SFT row in tokens; a longer row loses its transcript's oldest steps")
    p.add_argument("--sft-heldout", type=int, default=4,
                   help="SFT rows held out to measure the trained actor against the base (NLL, greedy actions)")
    p.add_argument("--expert-share", type=float, default=0.25,
                   help="when the collecting agent wins no episode: share of the train games ALFWorld's hand-coded "
                        "expert plays once each (records marked expert; 0 = no seed). A departure from the paper")
    p.add_argument("--dpo-steps", type=int, default=50)
    p.add_argument("--sa-epochs", type=int, default=30)
    p.add_argument("--sa-without-task", action="store_true",
                   help="train M_sa without its task input (a named variant, not the paper's M_sa; on held-out "
                        "games it scored better with small collections: docs/experiments/alfworld-heldout.md)")
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
                         train_games=a.train_games,
                         collect_episodes=a.collect_episodes, adapt_episodes=a.adapt_episodes,
                         test_episodes=a.test_episodes, max_steps=a.max_steps, sft_steps=a.sft_steps,
                         sft_lr=a.sft_lr, lora_rank=a.lora_rank, train_dtype=a.train_dtype,
                         sft_rows_per_game=a.sft_rows_per_game,
                         sft_row_tokens=a.sft_row_tokens, sft_heldout=a.sft_heldout, expert_share=a.expert_share,
                         dpo_steps=a.dpo_steps, sa_epochs=a.sa_epochs, sa_task_input=not a.sa_without_task, seed=a.seed,
                         dpo_unhelpful=a.dpo_unhelpful,
                         dpo_cross_task=a.dpo_cross_task, env_options=parse_options(a.env_opt, "--env-opt"),
                         agent_options=parse_options(a.agent_opt, "--agent-opt"))
    for name in ("sft_steps", "lora_rank", "sft_rows_per_game", "sft_row_tokens"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    if cfg.sft_heldout < 0:
        raise UsageError(f"--sft-heldout must be >= 0, got {cfg.sft_heldout}")
    if not 0.0 <= cfg.expert_share <= 1.0:
        raise UsageError(f"--expert-share must be from 0 to 1, got {cfg.expert_share}")
    if not cfg.sft_lr > 0:
        raise UsageError(f"--sft-lr must be > 0, got {cfg.sft_lr}")
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
