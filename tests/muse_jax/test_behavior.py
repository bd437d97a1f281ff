"""Actor-critic math: lambda-returns against a hand computation, return normalisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from muse_jax import behavior
from muse_jax.config import Config


@pytest.mark.parametrize("jit", [False, True])
def test_lambda_return_matches_hand_computation(jit):
    rew = jnp.array([[0.0, 1.0, 2.0, 3.0]])
    cont = jnp.array([[1.0, 1.0, 0.5, 1.0]])
    val = jnp.array([[0.0, 10.0, 20.0, 30.0]])
    disc, lam = 0.9, 0.8
    f = jax.jit(behavior.lambda_return, static_argnums=(3, 4)) if jit else behavior.lambda_return
    ret = f(rew, cont, val, disc, lam)
    # by hand, backwards from R_3 = v_3 = 30
    r2 = 3.0 + disc * 1.0 * ((1 - lam) * 30.0 + lam * 30.0)
    r1 = 2.0 + disc * 0.5 * ((1 - lam) * 20.0 + lam * r2)
    r0 = 1.0 + disc * 1.0 * ((1 - lam) * 10.0 + lam * r1)
    np.testing.assert_allclose(ret, [[r0, r1, r2]], rtol=1e-6)


def test_lambda_one_is_discounted_monte_carlo_and_zero_is_td():
    rew = jnp.array([[0.0, 1.0, 1.0]])
    cont = jnp.ones((1, 3))
    val = jnp.array([[0.0, 5.0, 7.0]])
    mc = [[1 + 0.5 * (1 + 0.5 * 7), 1 + 0.5 * 7]]
    np.testing.assert_allclose(behavior.lambda_return(rew, cont, val, 0.5, 1.0), mc)
    np.testing.assert_allclose(behavior.lambda_return(rew, cont, val, 0.5, 0.0), [[1 + 0.5 * 5, 1 + 0.5 * 7]])


def test_lambda_return_has_no_loop_and_equals_the_rolled_recurrence():
    """The recurrence is a parallel prefix (`lax.associative_scan`), so the train step holds no while
    loop for it (on a GPU each iteration is a kernel launch and a host round trip); the numbers equal
    the rolled `lax.scan` of the same recurrence to float32 reordering."""
    key = jax.random.key(0)
    rew, val = jax.random.normal(key, (64, 16)), 10.0 * jax.random.normal(jax.random.key(1), (64, 16))
    cont = (jax.random.uniform(jax.random.key(2), (64, 16)) > 0.1).astype(jnp.float32)
    disc, lam = 0.997, 0.95
    lowered = jax.jit(behavior.lambda_return, static_argnums=(3, 4)).lower(rew, cont, val, disc, lam)
    assert "while" not in lowered.as_text()

    def rolled(nxt, inp):
        r, c, v = inp
        ret = r + disc * c * ((1 - lam) * v + lam * nxt)
        return ret, ret

    _, want = jax.lax.scan(rolled, val[:, -1], (rew[:, 1:].T, cont[:, 1:].T, val[:, 1:].T), reverse=True)
    np.testing.assert_allclose(behavior.lambda_return(rew, cont, val, disc, lam), want.T, rtol=1e-5, atol=1e-4)


def test_percentile_scale_ema_and_limit():
    cfg = Config()
    ret = jnp.linspace(0.0, 100.0, 101)
    lo, hi, scale = behavior.percentile_scale(ret, jnp.array(0.0), jnp.array(0.0), cfg)
    np.testing.assert_allclose([lo, hi], [0.01 * 5.0, 0.01 * 95.0], rtol=1e-5)
    assert float(scale) == 1.0  # range 0.9 < limit 1
    lo, hi, scale = behavior.percentile_scale(ret, jnp.array(0.0), jnp.array(500.0), cfg)
    np.testing.assert_allclose(scale, 0.99 * 500 + 0.95 - 0.05, rtol=1e-5)
    assert behavior.discount(cfg) == pytest.approx(1 - 1 / 333)
