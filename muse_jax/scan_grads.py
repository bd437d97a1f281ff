"""A recurrence whose parameter gradient is taken after the loop: `scan_with_param_grads_after`.

Reverse-mode differentiation of `lax.scan` over a body with loop-invariant parameters accumulates the
parameters' gradient inside the backward loop: every step computes its own weight gradients (a matmul of
the step's few rows per weight matrix, a reduction per norm scale and bias) and adds them to a running sum.
For the RSSM's observe scan (16 rows a step, 64 steps) that is 64 small matmuls per weight where one large
one would do, and on a GPU, where the train step is a chain of small kernels, ~10-20 more kernels per step.

Here the backward loop carries only what must be sequential, the state's cotangent, and records the
cotangent that reaches each step's outputs. The parameter gradient is then one vector-Jacobian product of
the step batched over all T steps (`jax.vmap` over time at the recorded inputs and carries), in which the
sum over steps is part of each large contraction. The same sums in another order: the values are the
scan's, the gradients equal to float32 reordering (`tests/muse_jax/test_scan_grads.py`). The price is one
more forward pass of the step, batched, to linearise it at every step at once.

The step's cotangent per step is read with a zero "sink" added to the carry the step hands on: the sink's
cotangent is exactly the cotangent of that carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Step = Callable[[Any, Any, Any], tuple[Any, Any]]
"""step(params, carry, x) -> (next carry, y)."""


def scan_with_param_grads_after(step: Step, params: Any, init: Any, xs: Any, *, unroll: int = 1,
                                remat_policy: Callable[..., bool] | None = None) -> tuple[Any, Any]:
    """`lax.scan(lambda c, x: step(params, c, x), init, xs)`, differentiated with the parameters' gradient
    computed after the backward loop (module docstring). `remat_policy` checkpoints the step, as
    `jax.checkpoint(step, policy=...)` inside a plain scan would. Differentiable in all of `params`, `init`
    and `xs` (float leaves)."""

    def chain_step(p: Any, carry: Any, inp: tuple[Any, Any]) -> tuple[Any, Any]:
        x, sink = inp
        nxt, y = step(p, carry, x)
        return jax.tree.map(jnp.add, nxt, sink), (y, carry)  # the carry a step received, for the batched VJP

    if remat_policy is not None:
        chain_step = jax.checkpoint(chain_step, prevent_cse=False, policy=remat_policy)

    def forward(p: Any, c0: Any, x: Any) -> tuple[tuple[Any, Any], Any]:
        sinks = jax.tree.map(lambda c: jnp.zeros((_length(x), *c.shape), c.dtype), c0)
        chain = lambda c0_, x_, s_: jax.lax.scan(lambda c, i: chain_step(p, c, i), c0_, (x_, s_), unroll=unroll)
        (last, (ys, carries_in)), vjp_chain = jax.vjp(chain, c0, x, sinks)
        return (last, ys), (vjp_chain, p, carries_in, x)

    @jax.custom_vjp
    def run(p: Any, c0: Any, x: Any) -> tuple[Any, Any]:  # undifferentiated: the plain scan
        body = lambda c, i: step(p, c, i)
        if remat_policy is not None:
            body = jax.checkpoint(body, prevent_cse=False, policy=remat_policy)
        return jax.lax.scan(body, c0, x, unroll=unroll)

    def run_bwd(res: Any, cts: tuple[Any, Any]) -> tuple[Any, Any, Any]:
        vjp_chain, p, carries_in, x = res
        ct_last, ct_ys = cts
        zero_carries = jax.tree.map(jnp.zeros_like, carries_in)  # the recorded carries are not outputs
        ct_c0, ct_x, ct_sinks = vjp_chain((ct_last, (ct_ys, zero_carries)))
        batched = lambda p_: jax.vmap(lambda c, i: step(p_, c, i))(carries_in, x)
        _, vjp_params = jax.vjp(batched, p)
        (ct_p,) = vjp_params((ct_sinks, ct_ys))
        return ct_p, ct_c0, ct_x

    run.defvjp(forward, run_bwd)
    return run(params, init, xs)


def _length(xs: Any) -> int:
    return jax.tree.leaves(xs)[0].shape[0]
