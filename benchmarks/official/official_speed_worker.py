"""Runs INSIDE .official/venv (or any python with the official's requirements, e.g. on a GPU machine): times
the official DreamerV3 train step, on request, for speed.py.

Builds the official agent (configs.yaml `defaults` + a size preset, `--platform`, `--dtype`) for a synthetic
env with a `--obs-dim` vector observation and a `--act-dim` continuous action (the setting of
benchmarks/wm_throughput.py), fills the official replay with the agent's own acting (1 env, random
observations), compiles the train step, then answers each stdin line "N" by timing N train steps
(each waited for) on pre-sampled official batches and printing one JSON line of seconds. "quit" ends.

Startup is reported like this project's side: `agent_s` is make_agent (which builds and compiles the
official's programs), `ready_s` make_agent + init_train + the first train call, replay filling excluded.
Under jax >= 0.5 `jax.jit` takes its options as keywords only and 3.3.1 passes them positionally;
`_keyword_jit` turns them into keywords (nothing else changes).

`--deterministic false` builds the agent with deterministic GPU ops off. The official's own default is on
(`embodied/jax/internal.py` `setup(deterministic=True)`: `--xla_gpu_deterministic_ops=true` and
`TF_CUDNN_DETERMINISTIC=1`), and configs.yaml has no key for it, so `_deterministic_ops` passes the
setting to that function; the official at its fastest is the stronger control for a speed ratio.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time

JIT_POSITIONAL = ("in_shardings", "out_shardings", "static_argnums", "static_argnames", "donate_argnums",
                  "donate_argnames", "keep_unused", "device", "backend", "inline", "abstracted_axes")
"""jax.jit's options in their positional order of jax 0.4.x, the order dreamer 3.3.1 passes them in."""


def minor_faults() -> int:
    """This process's minor page faults so far (all threads): what a step pays to map fresh host memory."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _keyword_jit(jax) -> None:
    """Let the official's positional `jax.jit(fn, in_shardings, ...)` run under jax >= 0.5."""
    jit = jax.jit
    if getattr(jit, "_positional_shim", False):
        return

    @functools.wraps(jit)
    def shim(fun=None, *args, **kwargs):
        kwargs.update(zip(JIT_POSITIONAL[:len(args)], args, strict=True))
        return jit(fun, **kwargs) if fun is not None else functools.partial(shim, **kwargs)

    shim._positional_shim = True
    jax.jit = shim


DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"
"""What the official's `internal.setup` adds to XLA_FLAGS when deterministic: the worker reports whether the
agent it built set it (what the official did, not what was asked)."""


def _deterministic_ops(internal, on: bool) -> None:
    """Make the official's `internal.setup` (called by its Agent on construction) use `deterministic=on`
    whatever its caller passes; the default (on) leaves the official untouched."""
    if on:
        return
    setup = internal.setup

    @functools.wraps(setup)
    def with_setting(*args, **kwargs):
        kwargs["deterministic"] = False
        return setup(*args, **kwargs)

    internal.setup = with_setting


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--size", default="size1m")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--obs-dim", type=int, default=24)
    p.add_argument("--act-dim", type=int, default=6)
    p.add_argument("--platform", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--deterministic", choices=("true", "false"), default="true",
                   help="the official's deterministic GPU ops (its default: true)")
    args = p.parse_args()
    sys.path.insert(0, args.src)
    import elements
    import embodied
    import jax
    import numpy as np

    if tuple(int(v) for v in jax.__version__.split(".")[:2]) >= (0, 5):
        _keyword_jit(jax)
    import ruamel.yaml as yaml
    from dreamerv3 import main as dmain
    from embodied.jax import internal

    _deterministic_ops(internal, args.deterministic == "true")

    class Synthetic(embodied.Env):
        """Random vector observations, 500-step episodes, never terminal."""

        def __init__(self):
            self._rng, self._t = np.random.default_rng(0), 0

        @property
        def obs_space(self):
            return {"vector": elements.Space(np.float32, (args.obs_dim,)), "reward": elements.Space(np.float32),
                    "is_first": elements.Space(bool), "is_last": elements.Space(bool),
                    "is_terminal": elements.Space(bool)}

        @property
        def act_space(self):
            return {"action": elements.Space(np.float32, (args.act_dim,), -1, 1), "reset": elements.Space(bool)}

        def step(self, action):
            first = bool(action["reset"]) or self._t == 0 or self._t >= 500
            self._t = 1 if first else self._t + 1
            return {"vector": self._rng.normal(size=args.obs_dim).astype(np.float32),
                    "reward": np.float32(0.0 if first else self._rng.normal()), "is_first": first,
                    "is_last": self._t == 500, "is_terminal": False}

    configs = yaml.YAML(typ="safe").load(elements.Path(args.src + "/dreamerv3/configs.yaml").read())
    config = elements.Config(configs["defaults"]).update(configs[args.size])
    logdir = tempfile.mkdtemp(prefix="official_speed_")
    platform = {"gpu": "cuda"}.get(args.platform, args.platform)  # the official spells the GPU "cuda"
    config = config.update({"logdir": logdir, "batch_size": args.batch, "batch_length": args.seq,
                            "jax.platform": platform, "jax.compute_dtype": args.dtype, "jax.prealloc": False,
                            "replay.size": 1e5})
    dmain.make_env = lambda config, index, **kw: dmain.wrap_env(Synthetic(), config)
    t_agent = time.perf_counter()
    agent = dmain.make_agent(config)
    agent_s = time.perf_counter() - t_agent
    replay = dmain.make_replay(config, "replay")
    driver = embodied.Driver([lambda: dmain.make_env(config, 0)], parallel=False)
    driver.on_step(replay.add)
    driver.reset(agent.init_policy)
    driver(lambda *a: agent.policy(*a, mode="train"), steps=args.batch * (args.seq + 1) + 200)
    stream = iter(agent.stream(dmain.make_stream(config, replay, "train")))
    first = next(stream)
    t_init = time.perf_counter()
    carry = agent.init_train(args.batch)
    init_s = time.perf_counter() - t_init

    def step(batch):
        nonlocal carry
        carry, _, _ = agent.train(carry, batch)
        jax.block_until_ready(agent.params)

    t0 = time.perf_counter()
    step(first)  # compiles
    compile_s = time.perf_counter() - t0
    step(next(stream))
    n_params = int(sum(np.prod(v.shape) for v in agent.params.values()))
    built_deterministic = DETERMINISTIC_FLAG in os.environ.get("XLA_FLAGS", "")
    print(json.dumps({"ready": True, "compile_s": compile_s, "agent_s": agent_s, "init_s": init_s,
                      "ready_s": agent_s + init_s + compile_s, "params": n_params, "jax": jax.__version__,
                      "device": jax.devices()[0].device_kind, "deterministic": built_deterministic}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        n = int(line)
        batches = [next(stream) for _ in range(n)]
        times, cpu, faults = [], [], []
        for batch in batches:
            f0, c0, t0 = minor_faults(), time.process_time(), time.perf_counter()
            step(batch)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            faults.append(minor_faults() - f0)
        print(json.dumps({"times": times, "cpu": cpu, "minor_faults": faults}), flush=True)


if __name__ == "__main__":
    main()
