"""`auto` loop settings: how the train step's scans compile, chosen for the backend that compiles them.

`model.observe_unroll`, `behavior.imag_unroll`, `model.observe_remat` and `model.observe_param_grads` change
how XLA builds the step's loops, never what it computes (values equal to float32 reordering;
tests/muse_jax/test_rssm.py, tests/muse_jax/test_scan_grads.py). Their default, `auto`, takes the fastest
measured setting for the backend:

- CPU (and any backend not measured, TPU included): rolled scans, every intermediate stored. On the CPU
  each scan step is a few large fused ops already; unrolling adds compile time and costs 4-18% per step
  (docs/speed.md, "The train step: what was tried on the CPU"); remat changes nothing there.
- GPU: the observe scan unrolled 8 steps per loop iteration, imagination unrolled over its whole horizon,
  and the observe scan's backward pass recomputing its elementwise ops from the stored matmul outputs
  (`dots`). There the step is a chain of ~15k tiny kernels; unrolled, the host submits 19 launches per step
  instead of ~5-6k, and `dots` drops most per-step stores. Measured on one H200 against the rolled default
  in the same session: size1m 14.8 -> 9.5 ms, size12m 22.5 -> 17.8 ms per step (docs/speed.md, "Scan
  settings on a GPU"; `docs/official_speed_gpu.jsonl`). The observe scan's parameter gradient is taken
  after its backward loop (`after_loop`): 21% fewer kernels per size12m step by the compiler's count for
  an H100 (docs/speed.md, "Weight gradients after the loop"; not yet timed on a GPU). On the CPU it costs
  time at size1m (+17% for the observe scan's forward and backward) and saves 4% at size12m, so the CPU
  keeps `in_loop`.

A number (or `none`/`dots`/`nothing`) given in a config or with `--set` is used as given on every backend.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from muse_jax.config.schema import Config

AUTO = "auto"
"""The value that asks for the backend's measured setting."""

GPU_BACKENDS = ("gpu", "cuda", "rocm")
"""`jax.default_backend()` names (and `jax.devices()[0].platform` names) that take the GPU setting."""

GPU_OBSERVE_UNROLL = 8
"""Observe-scan steps per loop iteration on a GPU (of T=64: 8 iterations; full unrolling, 64, compiled 2.6x
longer for no fewer host launches by the compiler's count, docs/gpu_kernels.jsonl)."""

GPU_OBSERVE_REMAT = "dots"
"""What the observe scan's backward pass finds stored on a GPU (`jax.checkpoint_policies.dots_saveable`)."""

GPU_OBSERVE_PARAM_GRADS = "after_loop"
"""Where the observe scan's backward pass takes the parameters' gradient on a GPU (`muse_jax/scan_grads.py`)."""


@dataclasses.dataclass(frozen=True)
class Loops:
    """The concrete loop settings one compile uses."""

    observe_unroll: int
    """Posterior-filtering steps per iteration of the observe `lax.scan`."""
    imag_unroll: int
    """Imagination steps per iteration of its `lax.scan`."""
    observe_remat: str
    """`none`, `dots` or `nothing`: what the observe scan's backward pass finds stored."""
    observe_param_grads: str = "in_loop"
    """`in_loop` or `after_loop`: where the observe scan's backward pass takes the parameters' gradient."""


def loops_for(cfg: Config, backend: str) -> Loops:
    """`cfg`'s loop settings with each `auto` replaced by the setting measured fastest on `backend`
    (`jax.default_backend()`, or the platform a step is compiled for ahead of time)."""
    gpu = backend.lower() in GPU_BACKENDS
    unroll, imag, remat = cfg.model.observe_unroll, cfg.behavior.imag_unroll, cfg.model.observe_remat
    grads = cfg.model.observe_param_grads
    return Loops(
        observe_unroll=(GPU_OBSERVE_UNROLL if gpu else 1) if unroll == AUTO else int(unroll),
        imag_unroll=(cfg.behavior.imag_horizon if gpu else 1) if imag == AUTO else int(imag),
        observe_remat=(GPU_OBSERVE_REMAT if gpu else "none") if remat == AUTO else str(remat),
        observe_param_grads=(GPU_OBSERVE_PARAM_GRADS if gpu else "in_loop") if grads == AUTO else str(grads))


def with_loops_for(cfg: Config, backend: str) -> Config:
    """`cfg` with its `auto` loop settings written out for `backend` (a step compiled for another platform
    than the host's, e.g. `benchmarks/gpu_kernels.py`, resolves them before building)."""
    loops = loops_for(cfg, backend)
    return cfg.replace({"model.observe_unroll": loops.observe_unroll, "behavior.imag_unroll": loops.imag_unroll,
                        "model.observe_remat": loops.observe_remat,
                        "model.observe_param_grads": loops.observe_param_grads})
