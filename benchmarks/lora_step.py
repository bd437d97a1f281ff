"""One LoRA training step of Algorithm 3's SFT/DPO on a real model, base weights in float32 against bfloat16.

Why: `muse-llm alfworld-pipeline --train-dtype` chooses the dtype the base model is loaded in for LoRA
training (the LoRA weights and the optimizer stay float32). On a CPU with AMX (or on a GPU) bfloat16 matmuls
run natively; elsewhere they may be slower than float32. This script measures what the choice costs on the
machine at hand: forward and backward of one row of `--tokens` tokens, gradient checkpointing on (as trl
trains), the LoRA of `sft.wrap_lora`, both dtypes alternately `--repeats` times in one process after one
warm-up each, so both see the same load. The last line printed is one JSON object (seconds per row of each
dtype, medians, and `float32_over_bfloat16`); `--out` appends it to a JSON lines file.

    python benchmarks/lora_step.py --base ~/.cache/muse-llm/qwen1.5b-cc324af070c2ecbf --tokens 2048 \\
        --out docs/llm/lora_step_cpu.jsonl
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record, git_commit  # noqa: E402
from muse_common.machine import cpu_model  # noqa: E402

DTYPES = ("float32", "bfloat16")


def lora_step_seconds(model: object, tokens: int, seed: int = 0) -> float:
    """Wall seconds of one forward + backward of a `tokens`-long row through `model` (a LoRA-wrapped causal
    LM in training mode); the gradients are dropped afterwards."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 1000))
    ids = torch.randint(0, min(vocab, 1000), (1, tokens), generator=gen)
    start = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    seconds = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    return seconds


def main(argv: list[str] | None = None) -> dict:
    import torch

    from llm_side.training import sft
    from muse_common.arg_parser import ArgumentParser

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="a transformers model folder (e.g. a packaged model's cache)")
    p.add_argument("--tokens", type=int, default=2048, help="row length (SFT's --sft-row-tokens default)")
    p.add_argument("--repeats", type=int, default=2, help="timed steps of each dtype (median reported)")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--out", default=None, help="also append the JSON record to this JSON lines file")
    args = p.parse_args(argv)
    if args.tokens < 2 or args.repeats < 1 or args.lora_rank < 1:
        p.error("--tokens must be >= 2, --repeats and --lora-rank >= 1")
    if not (Path(args.base).expanduser() / "config.json").is_file():
        p.error(f"--base {args.base} is not a transformers model folder (no config.json)")

    models = {}
    for dtype in DTYPES:
        model, _ = sft.load_base(Path(args.base).expanduser(), dtype)
        model = sft.wrap_lora(model, args.lora_rank)
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
        model.train()
        lora_step_seconds(model, min(args.tokens, 64))  # warm-up: first-call allocations
        models[dtype] = model
    times: dict[str, list[float]] = {d: [] for d in DTYPES}
    loads = []
    for rep in range(args.repeats):
        for dtype in DTYPES:
            loads.append(round(os.getloadavg()[0], 2))
            times[dtype].append(round(lora_step_seconds(models[dtype], args.tokens, seed=rep), 3))
            print(f"lora_step: {dtype} {times[dtype][-1]} s", file=sys.stderr, flush=True)
    med = {d: statistics.median(times[d]) for d in DTYPES}
    record = {"benchmark": "lora_step", "base": Path(args.base).name, "tokens": args.tokens,
              "lora_rank": args.lora_rank, "gradient_checkpointing": True,
              **{f"{d}_s_per_row": round(med[d], 3) for d in DTYPES},
              **{f"{d}_steps_s": times[d] for d in DTYPES},
              "float32_over_bfloat16": round(med["float32"] / med["bfloat16"], 2) if med["bfloat16"] else None,
              "load_avg_1min": loads, "torch_threads": torch.get_num_threads(), "cpu_model": cpu_model(),
              "date": time.strftime("%Y-%m-%d"), "code": git_commit()}
    return emit_record(record, args.out)


if __name__ == "__main__":
    main()
