"""MUSE-LLM's rollout sampling: n rollouts from one batched `complete` call against n sequential calls.

Why: MUSE-LLM (paper 000 §4, Algorithm 2) samples `n_rollouts` (5) world-model rollouts at every
step from the same prompt. The local backend draws them in one `generate` call that shares the
prompt's prefill (`TransformersLLM._generate_shared_prefix`); this script measures what that buys
against calling the model once per rollout, same model, prompt, temperature and token budget, in
one process (so both sides see the same machine load). The prompt is MUSE-LLM's own rollout prompt
shape: a few-shot ALFWorld-style transcript, long enough that prefill matters as it does at run time.

    python benchmarks/llm_sampling.py --model smollm2 --rollouts 5 --max-tokens 64 --repeats 3

The server backend (`--model openai:URL:MODEL`) is measured the same way: "batched" is one
`complete(n=5)` call, which sends `n` in one request and, to a server that ignores `n` (llama.cpp),
the missing samples as concurrent requests for its parallel slots; "sequential" is five calls.
`--serve` starts `muse-llm serve --engine ENGINE` on the packaged `--model` first and measures through
it. llama-cpp-python's server queues concurrent requests on one context, so expect little gain there;
`transformers serve` ignores `n`, so its "batched" is concurrent single requests; llama.cpp's own
`llama-server -np 5` (pass its URL as `--model openai:URL:MODEL`) decodes them together.

The last line printed is one JSON object: `batched_s`, `sequential_s` (medians over repeats),
`speedup` (sequential / batched), `prompt_tokens`, and the settings.

`--agent-steps K` measures what a user waits for instead: ReAct and MUSE-LLM (rollouts as configured:
`--rollouts`, the CPU horizon, an untrained M_sa, which costs the same to run) each play the first K steps of
the same real ALFWorld game (`--game`, default the first of eval_out_of_distribution) with the same model in
this process, alternately `--repeats` times, after a warm-up step of ReAct and a warm-up of M_sa's embedder;
the JSON gives seconds per step of each (medians, and means: what a step costs averaged over the timed
part of the episode, whose prompt grows), the ratio MUSE / ReAct, whether each episode was won within the
K steps, and the machine's load average, since a shared machine's load moves both. `--agents react` times
ReAct alone, e.g. a whole 50-step episode (`--agent-steps 50`), the cost of the held-out study's ReAct arm.
Records go to `--out` too; `docs/llm/agent_steps_cpu.jsonl` makes the "LLM agent steps" page.

    python benchmarks/llm_sampling.py --model qwen0.5b --agent-steps 3 --repeats 1
    python benchmarks/llm_sampling.py --model qwen1.5b --serve --engine llama.cpp --threads 2 \
        --agent-steps 50 --agents react --out docs/llm/agent_steps_cpu.jsonl
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record  # noqa: E402
from llm_side.backends import TEST_MODEL, load_llm  # noqa: E402
from llm_side.serve import ServerFailed, resolve_engine, running  # noqa: E402

TRANSCRIPT_STEP = ("> go to countertop {i}\nOn the countertop {i}, you see a apple {i}, a bread {i}, "
                   "and a knife {i}.\n> think: The apple may be in the fridge; I should check there next.\nOK.\n")


def rollout_prompt(steps: int) -> str:
    """A ReAct-style transcript of `steps` steps, ending where MUSE-LLM asks for the next action."""
    head = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
            "a fridge 1 and a sinkbasin 1.\nYour task is to: put a cool apple in countertop.\n")
    return head + "".join(TRANSCRIPT_STEP.format(i=i) for i in range(1, steps + 1)) + ">"


def time_call(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    from muse_common.arg_parser import ArgumentParser

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=TEST_MODEL, help="a `muse-llm --model` spec (default: the test model)")
    p.add_argument("--rollouts", type=int, default=5, help="rollouts per decision (the paper's 5)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per rollout")
    p.add_argument("--prompt-steps", type=int, default=12, help="transcript steps in the prompt (prefill size)")
    p.add_argument("--temperature", type=float, default=0.5, help="sampling temperature (MUSE-LLM's default)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of each side (median reported)")
    p.add_argument("--serve", action="store_true",
                   help="start `muse-llm serve` on --model (packaged, gguf:FILE, hf:DIR) and time the server")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="server threads with --serve")
    p.add_argument("--engine", choices=("auto", "llama.cpp", "transformers"), default="auto",
                   help="the server `--serve` starts (muse-llm serve --engine; auto: llama.cpp where built)")
    p.add_argument("--agent-steps", type=int, default=0,
                   help="time K steps of ReAct and of MUSE-LLM on a real ALFWorld game instead (s/step, ratio)")
    p.add_argument("--game", default=None, help="ALFWorld task id for --agent-steps (default: first held-out game)")
    p.add_argument("--rollout-tokens", default="auto", help="MUSE's rollout_tokens for --agent-steps (default auto)")
    p.add_argument("--agents", default="react,muse",
                   help="which agents --agent-steps times, comma-separated: react, muse (default both)")
    p.add_argument("--out", default=None, help="also append the JSON record to this JSON lines file")
    args = p.parse_args(argv)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    if not agents or set(agents) - {"react", "muse"}:
        p.error(f"--agents takes react, muse or react,muse, got '{args.agents}'")
    args.agents = list(dict.fromkeys(agents))
    for name in ("rollouts", "max_tokens", "prompt_steps", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.temperature <= 0:
        p.error("--temperature must be > 0: greedy decoding draws one sample, so there is nothing to batch")

    run = agent_steps if args.agent_steps > 0 else measure
    if args.serve:
        if args.model.startswith("openai:"):
            p.error("--serve starts a server: pass a packaged model, gguf:FILE or hf:DIR as --model, or drop "
                    "--serve to measure the openai: server already running")
        try:
            engine = resolve_engine(args.engine, model=args.model)
        except RuntimeError as exc:
            p.error(str(exc))
        if engine == "llama.cpp" and args.model.startswith("hf:"):
            p.error("llama.cpp serves GGUF files: measure a transformers folder (hf:DIR) with --engine transformers")
        try:
            with running(args.model, engine=engine, threads=args.threads) as spec:
                args.server_threads = args.threads
                return run(args, spec, backend=f"openai-server (muse-llm serve --engine {engine})")
        except ServerFailed as exc:
            raise SystemExit(f"llm_sampling: error: {exc}") from None
    backend = "openai-server" if args.model.startswith("openai:") else "transformers"
    return run(args, args.model, backend=backend)


def measure(args: argparse.Namespace, spec: str, backend: str) -> dict:
    """Time one batched `complete(n)` against n sequential calls on the backend of `spec`."""
    llm = load_llm(spec)
    prompt = rollout_prompt(args.prompt_steps)
    kw = dict(temperature=args.temperature, max_tokens=args.max_tokens, stop=None)
    llm.complete(prompt, n=1, seed=0, **kw)  # warm-up: first-call allocations out of the timing

    def batched() -> None:
        llm.complete(prompt, n=args.rollouts, seed=1, **kw)

    def sequential() -> None:
        for i in range(args.rollouts):
            llm.complete(prompt, n=1, seed=1 + i, **kw)

    # alternate the two sides so slow drifts in machine load hit both alike
    b_times, s_times = [], []
    for _ in range(args.repeats):
        b_times.append(time_call(batched))
        s_times.append(time_call(sequential))
    tok = getattr(llm, "tokenizer", None)
    prompt_tokens = len(tok(prompt).input_ids) if tok is not None else None
    b, s = statistics.median(b_times), statistics.median(s_times)
    record = {"benchmark": "llm_sampling", "model": args.model, "backend": backend, "rollouts": args.rollouts,
              "max_tokens": args.max_tokens, "prompt_tokens": prompt_tokens, "temperature": args.temperature,
              "repeats": args.repeats, "batched_s": round(b, 4), "sequential_s": round(s, 4),
              "speedup": round(s / b, 3) if b > 0 else None,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    return emit_record(record, args.out)


def _step_times(env, agent, task: str, steps: int) -> tuple[list[float], bool]:
    """Seconds of each of the first `steps` steps of `agent` on `task` (the reflection after the episode,
    which both agents write alike, is not timed), and whether the episode was won within them."""
    from llm_side.harness.runner import run_episode

    marks = [time.perf_counter()]
    result = run_episode(env, agent, task_id=task, episode=0, max_steps=steps, seed=0,
                         on_step=lambda t: marks.append(time.perf_counter()))
    return [b - a for a, b in zip(marks, marks[1:], strict=False)], bool(result.get("success"))


def agent_steps(args: argparse.Namespace, spec: str, backend: str) -> dict:
    """ReAct's and MUSE-LLM's seconds per step on the same game, model and machine (module docstring)."""
    from benchmarks.report import git_commit
    from llm_side.agents import self_awareness as sa
    from llm_side.agents.muse import MuseAgent
    from llm_side.agents.react import ReActAgent
    from llm_side.backends import load_embedder
    from llm_side.envs.alfworld import make_env

    llm = load_llm(spec)
    env = make_env()
    task = args.game or env.task_ids("eval_out_of_distribution")[0]
    horizon = int(args.rollout_tokens) if str(args.rollout_tokens).isdigit() else args.rollout_tokens
    agents = {}
    if "react" in args.agents:
        agents["react"] = ReActAgent(llm)
    if "muse" in args.agents:
        agents["muse"] = MuseAgent(llm, sa.SelfAwarenessModel(load_embedder()), n_rollouts=args.rollouts,
                                   rollout_tokens=horizon)
        agents["muse"].msa.embed(["warm-up"])  # the sentence embedder loads on first use: not part of a step
    for agent in agents.values():
        agent.end_episode = lambda outcome: None  # no reflection / chunk scoring after the timed steps
    _step_times(env, ReActAgent(llm), task, 1)  # warm-up: first-call allocations out of the timing
    times: dict[str, list[float]] = {name: [] for name in agents}
    won: dict[str, list[bool]] = {name: [] for name in agents}
    loads = []
    try:
        for _ in range(args.repeats):
            for name, agent in agents.items():
                loads.append(os.getloadavg()[0])
                steps_s, success = _step_times(env, agent, task, args.agent_steps)
                times[name].extend(steps_s)
                won[name].append(success)
    finally:
        env.close()

    def median(name: str) -> float | None:
        return round(statistics.median(times[name]), 2) if times.get(name) else None

    def mean(name: str) -> float | None:
        return round(statistics.fmean(times[name]), 2) if times.get(name) else None

    r, m = median("react"), median("muse")
    record = {"benchmark": "llm_agent_steps", "model": args.model, "backend": backend, "game": task,
              "steps": args.agent_steps, "agents": args.agents,
              "repeats": args.repeats, "rollouts": args.rollouts, "rollout_tokens": args.rollout_tokens,
              "react_s_per_step": r, "muse_s_per_step": m,
              "react_mean_s_per_step": mean("react"), "muse_mean_s_per_step": mean("muse"),
              "muse_over_react": round(m / r, 2) if r and m else None,
              "react_steps_s": [round(x, 2) for x in times.get("react", [])],
              "muse_steps_s": [round(x, 2) for x in times.get("muse", [])],
              "react_won": won.get("react", []), "muse_won": won.get("muse", []),
              "load_avg_1min": [round(x, 2) for x in loads], "torch_threads": _threads(),
              "server_threads": getattr(args, "server_threads", None),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d"), "code": git_commit()}
    return emit_record(record, args.out)


def _threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
