"""The one way a learner comes back from a checkpoint: `restore_learner`.

`adapt` (pre-trained weights plus the retained replay), `load_agent` (evaluation from Python) and
any other reader go through it, so every checkpoint problem is named the same way (errors from
`muse_jax.errors`). The checkpoint's own config builds the networks: `meta["config"]`, the
observation spec in `meta["spec"]` and the seed; `overrides` may change what does not shape
parameters, and a `model.*` override that disagrees with the stored model is refused, naming both
values. The learner is built abstractly (`jax.eval_shape`: shapes, dtypes, shardings only) and the
weights restored into it, so no initialiser runs.

Pre-training (`loops/pretrain.py`) writes the meta this module reads: `spec_to_meta`, `agent`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from muse_jax.agent import ObsSpec, SplitLearner, create_learner
from muse_jax.agent_kinds import AGENT_KINDS
from muse_jax.checkpoint import Checkpointer, resolve_checkpoint_path
from muse_jax.config import CONFIG_KEYS_FREE_ON_RESUME, MODEL_SIZES, Config, closed_loop, from_dict
from muse_jax.envs.suite import obs_dims
from muse_jax.errors import CheckpointError, CheckpointMismatchError

__all__ = ["RestoredLearner", "abstract_learner", "checkpoint_agent_kind", "load_agent", "obs_spec",
           "restore_learner", "spec_from_meta", "spec_to_meta"]


def obs_spec(cfg: Config) -> ObsSpec:
    """What the networks are built for with this config: pixels and/or proprio, and the action size, of the
    configured suite and task (`envs.suite.obs_dims`)."""
    proprio_dim, act_dim = obs_dims(cfg.env)
    return ObsSpec.from_config(cfg, proprio_dim=proprio_dim, act_dim=act_dim)


def spec_to_meta(spec: ObsSpec) -> dict[str, Any]:
    """The ObsSpec as JSON, stored in meta["spec"] so a restore rebuilds the same networks."""
    return dataclasses.asdict(spec)


def spec_from_meta(meta: Mapping[str, Any], cfg: Config) -> ObsSpec:
    """Inverse of `spec_to_meta` (the Meta-World spec of `cfg` for checkpoints without one)."""
    raw = meta.get("spec")
    if raw is None:
        return obs_spec(cfg)
    raw = dict(raw)
    if raw.get("image_shape") is not None:
        raw["image_shape"] = tuple(raw["image_shape"])
    return ObsSpec(**raw)


def checkpoint_agent_kind(meta: Mapping[str, Any]) -> str:
    """The agent kind a pretrain checkpoint was trained as ("muse" for runs from before the field)."""
    return str(meta.get("agent", meta.get("config", {}).get("agent", AGENT_KINDS[0])))


def abstract_learner(cfg: Config, spec: ObsSpec, seed: int) -> SplitLearner:
    """The learner as (graphdef, state of jax.ShapeDtypeStructs) without running the initialisers.

    Eager initialisation of every layer costs seconds to minutes on a busy CPU; restoring only
    needs shapes, dtypes and shardings (one device: the restored state lives where a fresh one would).
    """
    box: dict[str, Any] = {}

    def build() -> Any:
        learner = create_learner(cfg, spec, seed)
        box["graphdef"] = learner.graphdef
        return learner.state

    state = jax.eval_shape(build)
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state)
    return SplitLearner(box["graphdef"], state)


def check_model_overrides(saved_config: Mapping[str, Any], overrides: Mapping[str, Any], step_dir: Path) -> None:
    """Refuse `model.*` overrides that disagree with the checkpoint's model (whether or not they would
    change a parameter shape), naming each key and both values."""
    model_keys = {k: v for k, v in overrides.items() if k == "model" or k.startswith("model.")}
    if not model_keys:
        return
    saved = from_dict(saved_config)
    model = dict(saved_config["model"])
    size = model_keys.get("model.size")
    if isinstance(size, str) and size in MODEL_SIZES:  # a new size brings its preset's widths, as in pretrain
        model = {k: v for k, v in model.items() if k not in MODEL_SIZES[size]}
    given = from_dict({**saved_config, "model": model}, model_keys).model
    diff = [f.name for f in dataclasses.fields(given) if getattr(given, f.name) != getattr(saved.model, f.name)
            and f"model.{f.name}" not in CONFIG_KEYS_FREE_ON_RESUME]  # how loops compile: not the model
    if diff:
        shown = ", ".join(f"model.{k}={getattr(saved.model, k)!r} (--set gives {getattr(given, k)!r})"
                          for k in diff[:4])
        raise CheckpointMismatchError(
            f"checkpoint {step_dir} does not fit the model asked for by --set: it was saved with {shown}. adapt "
            "builds the model from the checkpoint's config: drop the --set model.* flags.")


def _check_agent_kind(kind: str, agent: str | None, overrides: Mapping[str, Any], path: str | os.PathLike) -> None:
    if agent is not None and kind != agent:
        raise CheckpointMismatchError(
            f"--agent {agent} needs a checkpoint pre-trained with `muse-wm pretrain --agent {agent}`, but "
            f"{path} holds a {kind} agent; pre-train one with --agent {agent} (own --logdir) or "
            f"adapt this one with --agent {kind}.")
    if overrides.get("agent", kind) != kind:
        raise CheckpointMismatchError(f"--set agent={overrides['agent']} cannot change the agent kind of a {kind} "
                                      "checkpoint; drop it.")


@dataclasses.dataclass(frozen=True)
class RestoredLearner:
    """A learner restored from a checkpoint, with what was stored beside it."""

    cfg: Config
    learner: SplitLearner
    replay: dict[str, np.ndarray] | None
    """The pre-training replay arrays (Replay.state_dict layout) when asked for and stored, else None."""
    meta: dict[str, Any]
    step: int
    step_dir: Path


def restore_learner(path: str | os.PathLike, *, step: int | None = None, agent: str | None = None,
                    overrides: Mapping[str, Any] | None = None, with_replay: bool = False) -> RestoredLearner:
    """Restore the learner of a `muse-wm pretrain` checkpoint.

    `path` is a run logdir, its checkpoints/ folder or one step folder; `step` picks a step (default:
    the one `path` names, else the newest). With `agent`, a checkpoint pre-trained as the other agent
    kind is refused, naming the fix. `overrides` (dotted keys) are applied to the stored config.
    """
    directory, path_step = resolve_checkpoint_path(path)
    step = path_step if step is None else step
    overrides = dict(overrides or {})
    with Checkpointer(directory, read_only=True) as ck:
        meta = ck.read_meta(step)
        step = int(step if step is not None else ck.latest_step())
        step_dir = ck.step_dir(step)
        if "config" not in meta:
            raise CheckpointError(f"checkpoint {step_dir} was not written by `muse-wm pretrain` (no config in its "
                                  "meta); point at the --logdir of a pretrain run.")
        check_model_overrides(closed_loop(meta["config"]), overrides, step_dir)
        _check_agent_kind(checkpoint_agent_kind(meta), agent, overrides, path)
        saved = closed_loop(meta["config"])  # older runs saved the open-loop acting default
        saved_cfg, cfg = from_dict(saved), from_dict(saved, overrides)
        spec = spec_from_meta(meta, saved_cfg)
        if obs_spec(cfg) != obs_spec(saved_cfg):  # an override reshapes the inputs (e.g. env.image): build for
            spec = obs_spec(cfg)  # them, and the restore names the first parameter that no longer fits
        template = abstract_learner(cfg, spec, int(meta.get("seed", cfg.train.seed)))
        state, replay, meta = ck.restore(step, state_template=template.state, with_replay=with_replay)
    return RestoredLearner(cfg, SplitLearner(template.graphdef, state), replay, meta, step, step_dir)


def load_agent(path: str | os.PathLike, step: int | None = None) -> tuple[Config, Any, Any]:
    """(cfg, graphdef, state) of a checkpoint, for evaluation: `nnx.merge(graphdef, state).agent` acts."""
    restored = restore_learner(path, step=step)
    return restored.cfg, restored.learner.graphdef, restored.learner.state
