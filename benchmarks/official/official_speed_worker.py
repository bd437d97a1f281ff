"""Runs INSIDE .official/venv: times the official DreamerV3 train step, on request, for speed.py.

Builds the official agent (configs.yaml `defaults` + a size preset, CPU, float32) for a synthetic
env with a `--obs-dim` vector observation and a `--act-dim` continuous action (the setting of
benchmarks/wm_throughput.py), fills the official replay with the agent's own acting (1 env, random
observations), compiles the train step, then answers each stdin line "N" by timing N train steps
(each waited for) on pre-sampled official batches and printing one JSON line of seconds. "quit" ends.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--size", default="size1m")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--obs-dim", type=int, default=24)
    p.add_argument("--act-dim", type=int, default=6)
    args = p.parse_args()
    sys.path.insert(0, args.src)
    import elements
    import embodied
    import jax
    import numpy as np
    import ruamel.yaml as yaml
    from dreamerv3 import main as dmain

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
    config = config.update({"logdir": logdir, "batch_size": args.batch, "batch_length": args.seq,
                            "jax.platform": "cpu", "jax.compute_dtype": "float32", "jax.prealloc": False,
                            "replay.size": 1e5})
    dmain.make_env = lambda config, index, **kw: dmain.wrap_env(Synthetic(), config)
    agent = dmain.make_agent(config)
    replay = dmain.make_replay(config, "replay")
    driver = embodied.Driver([lambda: dmain.make_env(config, 0)], parallel=False)
    driver.on_step(replay.add)
    driver.reset(agent.init_policy)
    driver(lambda *a: agent.policy(*a, mode="train"), steps=args.batch * (args.seq + 1) + 200)
    stream = iter(agent.stream(dmain.make_stream(config, replay, "train")))
    carry = agent.init_train(args.batch)

    def step(batch):
        nonlocal carry
        carry, _, _ = agent.train(carry, batch)
        jax.block_until_ready(agent.params)

    t0 = time.perf_counter()
    step(next(stream))  # compiles
    compile_s = time.perf_counter() - t0
    step(next(stream))
    n_params = int(sum(np.prod(v.shape) for v in agent.params.values()))
    print(json.dumps({"ready": True, "compile_s": compile_s, "params": n_params, "jax": jax.__version__}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        n = int(line)
        batches = [next(stream) for _ in range(n)]
        times, cpu = [], []
        for batch in batches:
            c0, t0 = time.process_time(), time.perf_counter()
            step(batch)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(json.dumps({"times": times, "cpu": cpu}), flush=True)


if __name__ == "__main__":
    main()
