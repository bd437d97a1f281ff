"""One train step of this project's Dreamer and of the official DreamerV3, timed in the same run.

Why: a speed ratio between two implementations means something only when both are timed on the same
machine under the same load (machines of one kind differ by 2x in matmul throughput). This script
builds both at the setting of benchmarks/wm_throughput.py (a size preset, batch 16 x 64, 24-dim
vector observation, 6-dim continuous action; float32 or bfloat16 compute; CPU or GPU), compiles both, then times them
alternately in rounds (A B A B ...: `--rounds` rounds of `--steps` steps each) so that a change of
load hits both sides alike. This project's side runs in this process (agent "dreamer": no competence
head, like the official); the official side runs in .official/venv as a subprocess worker
(official_speed_worker.py) that waits while this side is timed. Both time the jitted train step only
(a batch already on the host), each step waited for.

    bash benchmarks/official/setup.sh
    python benchmarks/official/speed.py --size size1m size12m
    python benchmarks/official/speed.py --platform gpu --dtype bfloat16 --official-python python3 \
        --official-src .official/dreamer-3.3.1        # a GPU machine (benchmarks/gpu_session.sh)
    python benchmarks/official/speed.py --ours-only   # no official code at hand: this project's side alone

On a GPU both processes share the device: neither preallocates its memory (XLA_PYTHON_CLIENT_PREALLOCATE
is set false for both). Startup is compared like with like: `*_ready_s` is each side's time from "build
the agent" to the end of its first train step (parameter init, train-step compile, first run; the
official's make_agent, which compiles its policy and train programs, its init_train and its first train
call), replay filling and imports excluded.

Prints one JSON line per size (the last line is the summary of all sizes), with medians, process CPU
seconds per step (robust to other processes on the machine) and the ratio official / this project
(> 1: this project is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.official.official_speed_worker import minor_faults  # noqa: E402  (stdlib only: counted alike)
from benchmarks.official.run import official_available, official_paths  # noqa: E402
from benchmarks.report import emit_record, git_commit, run_conditions  # noqa: E402
from muse_common.files import append_jsonl  # noqa: E402


class OfficialWorker:
    """The official train step in its own venv, timed on request ("N" -> N step times)."""

    def __init__(self, size: str, batch: int, seq: int, obs_dim: int, act_dim: int, platform: str = "cpu",
                 dtype: str = "float32", python: str | None = None, src: str | None = None,
                 deterministic: bool = True) -> None:
        default_python, default_src = official_paths()
        cmd = [str(python or default_python), str(Path(__file__).resolve().parent / "official_speed_worker.py"),
               "--src", str(src or default_src), "--size", size, "--batch", str(batch), "--seq", str(seq),
               "--obs-dim", str(obs_dim), "--act-dim", str(act_dim), "--platform", platform, "--dtype", dtype,
               "--deterministic", "true" if deterministic else "false"]
        # Why not JAX_PLATFORMS=cpu always: on a GPU machine that timed the official on the host CPU.
        env = {**os.environ, "JAX_PLATFORMS": "cpu" if platform == "cpu" else "",
               "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        for line in self.proc.stdout:  # the official code prints its own banner and compile report too
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"the official speed worker exited (code {self.proc.wait()}) without a result")

    def time(self, steps: int) -> dict[str, list[float]]:
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


class ProjectSide:
    """This project's jitted train step (agent "dreamer") at the wm_throughput setting."""

    def __init__(self, size: str, batch: int, seq: int, obs_dim: int, act_dim: int, dtype: str = "float32",
                 overrides: list[str] | None = None) -> None:
        import jax

        from benchmarks.report import loops_record
        from benchmarks.wm_throughput import build_config, count_params, synthetic_batch
        from muse_jax.agent import ObsSpec, create_learner, make_train_step

        sets = ["agent=dreamer", f"model.compute_dtype={dtype}", *(overrides or [])]
        cfg = build_config(size, obs_dim, False, 64, batch, seq, sets)
        spec = ObsSpec.from_config(cfg, proprio_dim=obs_dim, act_dim=act_dim)
        batch_np = synthetic_batch(spec, batch, seq)
        t_build = time.perf_counter()
        learner = create_learner(cfg, spec, seed=0)
        jax.block_until_ready(learner.state)
        self.init_s = time.perf_counter() - t_build
        self.state = learner.state
        self.batch = jax.device_put(batch_np)
        self.keys = iter(jax.random.split(jax.random.key(0), 100_000))
        t0 = time.perf_counter()
        lowered = make_train_step(cfg, learner.graphdef, None).lower(self.state, self.batch, next(self.keys))
        self.step = lowered.compile()
        self.compile_s = time.perf_counter() - t0
        self._run()
        self.ready_s = time.perf_counter() - t_build  # init + compile + first step: time to the first update
        self.params = count_params(self.state)
        self.jax_version = jax.__version__
        self.device = jax.devices()[0].device_kind
        self.loops = loops_record(cfg)

    def _run(self) -> None:
        import jax

        self.state, metrics = self.step(self.state, self.batch, next(self.keys))
        jax.block_until_ready(metrics)

    def time(self, steps: int) -> dict[str, list[float]]:
        times, cpu, faults = [], [], []
        for _ in range(steps):
            f0, c0, t0 = minor_faults(), time.process_time(), time.perf_counter()
            self._run()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            faults.append(minor_faults() - f0)
        return {"times": times, "cpu": cpu, "minor_faults": faults}


def load1() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError):
        return float("nan")


def compare(size: str, args: argparse.Namespace) -> dict[str, Any]:
    """Both sides at `size` (or this project's alone with --ours-only), timed in alternating rounds."""
    official = None if args.ours_only else OfficialWorker(
        size, args.batch, args.seq, args.obs_dim, args.act_dim, args.platform, args.dtype, args.official_python,
        args.official_src, deterministic=not args.official_nondeterministic)
    try:
        ours = ProjectSide(size, args.batch, args.seq, args.obs_dim, args.act_dim, args.dtype, args.set)
        sides: dict[str, Any] = {"ours": ours, **({"official": official} if official else {})}
        res: dict[str, dict[str, list[float]]] = {k: {"times": [], "cpu": [], "minor_faults": []} for k in sides}
        loads = []
        for _ in range(args.rounds):
            for name, side in sides.items():
                loads.append(load1())
                got = side.time(args.steps)
                res[name]["times"] += got["times"]
                res[name]["cpu"] += got["cpu"]
                res[name]["minor_faults"] += got.get("minor_faults", [])  # a worker of an older checkout has none
    finally:
        if official:
            official.close()
    med = {k: statistics.median(v["times"]) for k, v in res.items()}
    cpu = {k: statistics.median(v["cpu"]) for k, v in res.items()}
    faults = {k: statistics.median(v["minor_faults"]) if v["minor_faults"] else None for k, v in res.items()}
    rec: dict[str, Any] = {
        "benchmark": "official_speed", "size": size, "batch": args.batch, "seq": args.seq,
        "obs_dim": args.obs_dim, "act_dim": args.act_dim, "dtype": args.dtype, "platform": args.platform,
        "device": ours.device, "overrides": args.set, "rounds": args.rounds, "steps_per_round": args.steps,
        "order": "ours, official alternating" if official else "ours only",
        "ours_train_step_median_s": med["ours"], "ours_train_step_cpu_s": cpu["ours"],
        "ours_times_s": res["ours"]["times"], "ours_compile_s": ours.compile_s, "ours_init_s": ours.init_s,
        "ours_ready_s": ours.ready_s, "ours_params": ours.params, "ours_jax": ours.jax_version,
        "ours_loops": ours.loops, "ours_minor_faults_per_step": faults["ours"],
        "loadavg_1m_min": min(loads), "loadavg_1m_max": max(loads), "cpu_cores": os.cpu_count(),
        "code": git_commit(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    if official:
        info = official.info
        rec.update({
            "official_train_step_median_s": med["official"], "official_train_step_cpu_s": cpu["official"],
            "speed_ratio_official_over_ours": med["official"] / med["ours"],
            "cpu_ratio_official_over_ours": cpu["official"] / cpu["ours"],
            "official_times_s": res["official"]["times"], "official_compile_s": info["compile_s"],
            "official_agent_s": info.get("agent_s"), "official_ready_s": info.get("ready_s"),
            "official_params": info["params"], "official_jax": info["jax"], "official_version": "dreamer==3.3.1",
            "official_device": info.get("device"), "official_minor_faults_per_step": faults["official"],
            "official_deterministic": info.get("deterministic", True),
        })
    return rec


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser

    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", nargs="+", default=["size1m", "size12m"], help="DreamerV3 size presets")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--obs-dim", type=int, default=24)
    p.add_argument("--act-dim", type=int, default=6)
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds (ours, official) per size")
    p.add_argument("--steps", type=int, default=3, help="timed train steps per side per round")
    p.add_argument("--platform", choices=("cpu", "gpu"), default="cpu",
                   help="where both sides run (gpu: the official worker is not forced onto the CPU)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="compute dtype of both sides (model.compute_dtype; the official's jax.compute_dtype)")
    p.add_argument("--official-python", help="python that runs the official worker (default: .official/venv)")
    p.add_argument("--official-src", help="unpacked official source (default: .official/dreamer-3.3.1)")
    p.add_argument("--ours-only", action="store_true", help="time this project's side alone (no official code)")
    p.add_argument("--official-nondeterministic", action="store_true",
                   help="build the official with deterministic GPU ops off (its default is on; no effect on CPU)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for this project's side, e.g. --set model.observe_unroll=4")
    p.add_argument("--out", help="also append every record (per size, then the summary) to this JSONL file")
    args = p.parse_args(argv)
    if min(args.batch, args.seq, args.obs_dim, args.act_dim, args.rounds, args.steps) < 1:
        p.error("--batch, --seq, --obs-dim, --act-dim, --rounds and --steps must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.platform == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    else:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the official worker shares the GPU
    reason = None if args.ours_only or args.official_python else official_available()
    if reason:
        raise SystemExit(reason)
    records = []
    for size in args.size:
        rec = compare(size, args)
        # the processor, and a host-memory setting or XLA_FLAGS inherited by both workers: both sides ran under it
        rec.update({k: v for k, v in run_conditions().items() if k not in rec})
        print(json.dumps(rec), flush=True)
        if args.out:
            append_jsonl(args.out, rec)
        records.append(rec)
    summary = {"benchmark": "official_speed_summary", "platform": args.platform, "dtype": args.dtype,
               "device": records[0]["device"],
               "ratios_official_over_ours": {r["size"]: r.get("speed_ratio_official_over_ours") for r in records},
               "train_step_median_s": {r["size"]: {"ours": r["ours_train_step_median_s"],
                                                   "official": r.get("official_train_step_median_s")}
                                       for r in records},
               "ready_s": {r["size"]: {"ours": r["ours_ready_s"], "official": r.get("official_ready_s")}
                           for r in records},
               "loadavg_1m_range": [min(r["loadavg_1m_min"] for r in records),
                                    max(r["loadavg_1m_max"] for r in records)],
               "cpu_cores": os.cpu_count()}
    return emit_record(summary, args.out)


if __name__ == "__main__":
    main()
