"""Where the CPU time of one train step goes: the step's parts, each timed as its own jitted program.

Why: the train step is ~1.2-1.4x the official DreamerV3's on the 2-core CPU and many whole-step tweaks
moved nothing (docs/speed.md). This script says which part the time is in. It builds the step as
benchmarks/wm_throughput.py and benchmarks/official/speed.py --ours-only do (size preset, B16 x T64,
24-dim vector observation, 6-dim action, agent "dreamer", float32) and times, on the same learner state
and batch, each waited for (`block_until_ready`), in rounds (one call of every part per round, so a
change of load hits all parts alike), median over `--steps` rounds after one warm-up:

    full        the whole jitted train step (agent.make_train_step, state donated)
    wm_fwd      the world-model loss, forward only (WorldModel.loss)
    wm_grad     the world-model loss, value_and_grad w.r.t. the world model
    obs_fwd     the observe scan alone (RSSM.observe on a precomputed embedding; its prior over B*T is
                not an output, so XLA drops it)
    obs_grad    that scan forward + backward (w.r.t. the RSSM parameters and the embedding; fixed random
                cotangents on deter, stoch and posterior logits stand in for the heads' and KL's)
    imag_fwd    imagination's rollout alone, forward (behavior.imagine: the actor + RSSM prior scan over
                imag_horizon steps from all B*T posterior starts, then the reward and continue heads)
    ac_fwd      the actor-critic part on the posterior starts: imagine + actor/critic losses + the replay
                value loss, forward
    ac_grad     the same, value_and_grad w.r.t. actor and critic (the starts are inputs, so the replay value
                loss's gradient into the world model, which the full step takes, is not here)
    opt         the optimiser alone: the LaProp chain's update + apply_updates on the trained parameter tree

What cannot be isolated cleanly: the full step differentiates one folded loss, so XLA fuses and
schedules across these parts; wm_grad + ac_grad + opt (`sum_grad_parts_share`) is a check, not an identity.
The parts run without donation (fresh output buffers); the full step donates its state.

    python benchmarks/step_breakdown.py --size size1m --steps 5

Prints one JSON line: per part the median wall and process CPU seconds and its share of the full step's
(`share_cpu`, `share_wall`), and `load` (1-minute load average) before and after the timed rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record, loops_record  # noqa: E402
from benchmarks.wm_throughput import build_config, synthetic_batch  # noqa: E402
from muse_jax import behavior  # noqa: E402
from muse_jax.agent import Learner, ObsSpec, _trained, create_learner, make_optimizer, make_train_step  # noqa: E402
from muse_jax.behavior import Actor, Critic  # noqa: E402
from muse_jax.config import MODEL_SIZES, Config  # noqa: E402
from muse_jax.config.loops import loops_for  # noqa: E402
from muse_jax.nets import feature  # noqa: E402
from muse_jax.rssm import RSSM  # noqa: E402
from muse_jax.world_model import Batch  # noqa: E402

PARTS = ("full", "wm_fwd", "wm_grad", "obs_fwd", "obs_grad", "imag_fwd", "ac_fwd", "ac_grad", "opt")


def load() -> float:
    return os.getloadavg()[0]


def part_programs(cfg: Config, graphdef: Any, state: Any, batch: Batch, key: jax.Array,
                  ) -> dict[str, Callable[[], Any]]:
    """name -> a no-argument call of that part's compiled program (the full step advances its own state copy)."""
    B, T = batch["action"].shape[:2]
    lw = cfg.loss
    merge = lambda s: nnx.merge(graphdef, s)

    def wm_fwd(s: Any, b: Batch, k: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        loss, (metrics, _) = merge(s).agent.wm.loss(b, k)
        return loss, metrics

    def wm_grad(s: Any, b: Batch, k: jax.Array) -> tuple[jax.Array, Any]:
        (loss, _), grads = nnx.value_and_grad(lambda wm: wm.loss(b, k), has_aux=True)(merge(s).agent.wm)
        return loss, grads

    def starts_and_embed(s: Any, b: Batch, k: jax.Array) -> tuple[Batch, jax.Array]:
        # the observe and actor-critic parts' inputs (untimed)
        wm = merge(s).agent.wm
        return wm.loss(b, k)[1][1], wm.encode(b)

    loops = loops_for(cfg, jax.default_backend())  # as the train step compiles its scans here

    def observe(rssm: RSSM, embed: jax.Array, b: Batch, k: jax.Array) -> tuple[jax.Array, ...]:
        _, post = rssm.observe(rssm.initial(B), jnp.asarray(b["action"], jnp.float32), embed,
                               jnp.asarray(b["is_first"], bool), k, unroll=loops.observe_unroll,
                               remat=loops.observe_remat,
                               param_grads_after=loops.observe_param_grads == "after_loop")
        return post["deter"], post["stoch"], post["post"]

    def obs_fwd(s: Any, embed: jax.Array, b: Batch, k: jax.Array) -> tuple[jax.Array, ...]:
        return observe(merge(s).agent.wm.rssm, embed, b, k)

    def obs_grad(s: Any, embed: jax.Array, b: Batch, k: jax.Array, cot: tuple[jax.Array, ...]) -> Any:
        def loss(rssm: RSSM, e: jax.Array) -> jax.Array:
            return sum((x * c).sum() for x, c in zip(observe(rssm, e, b, k), cot, strict=True))

        return nnx.value_and_grad(loss, argnums=(0, 1))(merge(s).agent.wm.rssm, embed)

    flat = lambda x: x.reshape(B * T, *x.shape[2:])

    def imag_fwd(s: Any, starts: Batch, k: jax.Array) -> Batch:
        agent = merge(s).agent
        return behavior.imagine(agent.wm, agent.actor, jax.tree.map(flat, starts), k, cfg.behavior.imag_horizon)

    def ac_loss(actor: Actor, critic: Critic, tr: Learner, starts: Batch, b: Batch, k: jax.Array,
                ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        agent = tr.agent
        traj = behavior.imagine(agent.wm, actor, jax.tree.map(flat, starts), k, cfg.behavior.imag_horizon)
        ac, _, outs = behavior.actor_critic_losses(actor, critic, agent.slow_critic, traj, tr.ret_lo.get_value(),
                                                   tr.ret_hi.get_value(), cfg)
        feat = feature(starts["deter"], starts["stoch"])
        repval, _ = behavior.replay_value_loss(
            critic, agent.slow_critic, feat, jnp.asarray(b["reward"], jnp.float32),
            jnp.asarray(b["is_terminal"], jnp.float32), outs["ret"][:, 0].reshape(B, T), cfg)
        return lw.policy * ac["actor"] + lw.value * ac["critic"] + lw.repval * repval, (outs["ret_lo"], outs["ret_hi"])

    def ac_fwd(s: Any, starts: Batch, b: Batch, k: jax.Array) -> tuple[jax.Array, Any]:
        tr = merge(s)
        return ac_loss(tr.agent.actor, tr.agent.critic, tr, starts, b, k)

    def ac_grad(s: Any, starts: Batch, b: Batch, k: jax.Array) -> Any:
        tr = merge(s)
        fn = lambda actor, critic: ac_loss(actor, critic, tr, starts, b, k)
        return nnx.value_and_grad(fn, argnums=(0, 1), has_aux=True)(tr.agent.actor, tr.agent.critic)

    def opt(s: Any, grads: Any) -> tuple[Any, Any]:
        tr = merge(s)
        params = tuple(nnx.state(m, nnx.Param) for m in _trained(tr.agent))
        updates, new_opt = make_optimizer(cfg).update(grads, tr.opt.get_value(), params)
        return optax.apply_updates(params, updates), new_opt

    def compiled(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        exe = jax.jit(fn).lower(*args).compile()
        return lambda: exe(*args)

    k_wm, k_img = jax.random.split(key)
    starts, embed = jax.block_until_ready(jax.jit(starts_and_embed)(state, batch, k_wm))
    shapes = jax.eval_shape(lambda: obs_fwd(state, embed, batch, k_wm))  # deter, stoch, posterior logits
    cot = tuple(jax.random.normal(jax.random.key(i), x.shape, jnp.float32) * 1e-3 for i, x in enumerate(shapes))
    agent = nnx.merge(graphdef, state).agent
    grads = jax.tree.map(lambda p: p * 1e-3 + 1e-4, tuple(nnx.state(m, nnx.Param) for m in _trained(agent)))

    full_state = jax.tree.map(jnp.array, state)  # its own copy: the full step donates and advances it
    step = make_train_step(cfg, graphdef).lower(full_state, batch, key).compile()

    def full() -> Any:
        nonlocal full_state
        full_state, metrics = step(full_state, batch, key)
        return metrics

    return {
        "full": full,
        "wm_fwd": compiled(wm_fwd, state, batch, k_wm),
        "wm_grad": compiled(wm_grad, state, batch, k_wm),
        "obs_fwd": compiled(obs_fwd, state, embed, batch, k_wm),
        "obs_grad": compiled(obs_grad, state, embed, batch, k_wm, cot),
        "imag_fwd": compiled(imag_fwd, state, starts, k_img),
        "ac_fwd": compiled(ac_fwd, state, starts, batch, k_img),
        "ac_grad": compiled(ac_grad, state, starts, batch, k_img),
        "opt": compiled(opt, state, grads),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    cfg = build_config(args.size, args.obs_dim, False, 64, args.batch, args.seq,
                       [f"agent={args.agent}", "model.compute_dtype=float32"])
    spec = ObsSpec.from_config(cfg, proprio_dim=args.obs_dim, act_dim=args.act_dim)
    learner = create_learner(cfg, spec, seed=0)
    batch = jax.device_put(synthetic_batch(spec, args.batch, args.seq))
    t0, c0 = time.perf_counter(), time.process_time()
    programs = part_programs(cfg, learner.graphdef, learner.state, batch, jax.random.key(0))
    assert tuple(programs) == PARTS
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    for fn in programs.values():  # warm-up
        jax.block_until_ready(fn())
    wall: dict[str, list[float]] = {k: [] for k in programs}
    cpu: dict[str, list[float]] = {k: [] for k in programs}
    load_before = load()
    for _ in range(args.steps):
        for name, fn in programs.items():
            c0, t0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(fn())
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    load_after = load()
    med_wall = {k: statistics.median(v) for k, v in wall.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    parts = {k: {"wall_s": med_wall[k], "cpu_s": med_cpu[k], "share_wall": med_wall[k] / med_wall["full"],
                 "share_cpu": med_cpu[k] / med_cpu["full"], "wall_times_s": wall[k]} for k in programs}
    grad_parts = ("wm_grad", "ac_grad", "opt")
    return {
        "benchmark": "step_breakdown", "size": args.size, "batch": args.batch, "seq": args.seq,
        "obs_dim": args.obs_dim, "act_dim": args.act_dim, "agent": args.agent, "dtype": "float32",
        "steps": args.steps, "loops": loops_record(cfg), "parts": parts,
        "sum_grad_parts_share": sum(med_cpu[k] for k in grad_parts) / med_cpu["full"],
        "compile_s": compile_s, "compile_cpu_s": compile_cpu_s,
        "load": load_before, "load_after": load_after, "cpu_cores": os.cpu_count(),
        "backend": jax.default_backend(), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser

    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", default="size1m", help=f"model size preset: {', '.join(MODEL_SIZES)}")
    p.add_argument("--batch", type=int, default=16, help="B, sequences per train batch")
    p.add_argument("--seq", type=int, default=64, help="T, sequence length")
    p.add_argument("--steps", type=int, default=5, help="timed rounds (one call of every part each; median)")
    p.add_argument("--agent", choices=("dreamer", "muse"), default="dreamer", help="agent kind")
    p.add_argument("--obs-dim", type=int, default=24, help="vector observation size D")
    p.add_argument("--act-dim", type=int, default=6, help="continuous action size A")
    p.add_argument("--out", help="also append the record to this JSONL file")
    args = p.parse_args(argv)
    if args.size not in MODEL_SIZES:
        p.error(f"--size {args.size!r} is not a preset; choose one of {list(MODEL_SIZES)}")
    if min(args.batch, args.steps, args.obs_dim, args.act_dim) < 1 or args.seq < 2:
        p.error("--batch, --steps, --obs-dim and --act-dim must be >= 1 and --seq >= 2")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    return emit_record(run(args), args.out)


if __name__ == "__main__":
    main()
