"""How far the official DreamerV3 3.3.1's two-hot mean (`embodied.jax.outs.TwoHot.pred`) is from the exact
mean, eager and under jax.jit, for a zero-initialised head and for small logits; and the same for the
`exact-twohot` variant of benchmarks/official/official_entry.py. Prints one JSON line per case.

    .official/venv/bin/python docs/learning_curves/tr512/twohot_noise/jit_rounding_check.py > jit_rounding_check.jsonl
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / ".official" / "dreamer-3.3.1"))
sys.path.insert(0, str(REPO / "benchmarks" / "official"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from embodied.jax import outs  # noqa: E402
from official_entry import exact_symmetric_twohot_mean  # noqa: E402

x = np.linspace(-20.0, 20.0, 255, dtype=np.float32)
BINS = jnp.asarray(np.sign(x) * np.expm1(np.abs(x)), jnp.float32)  # dreamerv3's symexp_twohot bins
official_pred = outs.TwoHot.pred


def exact_pred(self):
    return self.unsquash(exact_symmetric_twohot_mean(self.probs, self.bins))


rng = np.random.default_rng(0)
for name, pred in (("official", official_pred), ("exact-twohot", exact_pred)):
    outs.TwoHot.pred = pred
    for scale in (0.0, 1e-6, 1e-2):
        logits = (rng.normal(size=(1000, 255)) * scale).astype(np.float32)
        p = np.exp(logits.astype(np.float64))
        exact = (p / p.sum(-1, keepdims=True) * np.asarray(BINS, np.float64)).sum(-1)
        f = lambda lg: outs.TwoHot(lg, BINS).pred()  # noqa: E731
        eager = np.asarray(f(jnp.asarray(logits)), np.float64)
        jitted = np.asarray(jax.jit(f)(jnp.asarray(logits)), np.float64)
        print(json.dumps({"pred": name, "logit_scale": scale, "states": len(logits), "jax": jax.__version__,
                          "exact_abs_mean": float(np.abs(exact).mean()),
                          "eager_abs_error": float(np.abs(eager - exact).mean()),
                          "jit_abs_error": float(np.abs(jitted - exact).mean())}))
