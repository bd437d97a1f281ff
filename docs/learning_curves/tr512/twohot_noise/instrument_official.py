"""The official DreamerV3 3.3.1 run of benchmarks/official/official_entry.py, with extra metrics in its log.

Adds to every train step's metrics (the run's `logdir/metrics.jsonl`, keys `train/x_*`): the mean absolute
imagined reward and critic value, their spread, and how far the critic's logits are from mirror symmetry
(all bins, and the 100 outermost on each side). Used for `early_updates_cheetah-run.jsonl`: a zero-initialised
head whose outer logits stay mirrored decodes to exactly 0 in exact arithmetic, so any |value| there is
rounding. Same arguments as official_entry.py (run it with the official venv's python):

    .official/venv/bin/python docs/learning_curves/tr512/twohot_noise/instrument_official.py \
        --src .official/dreamer-3.3.1 --repo . --events E.jsonl --suite dmc --task cheetah-run --repeat 2 \
        --episode-frames 1000 --env-seed 9 -- <the dreamerv3 flags that benchmarks/official/run.py passes>
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / ".official" / "dreamer-3.3.1"))
sys.path.insert(0, str(REPO / "benchmarks" / "official"))

import dreamerv3.agent as A  # noqa: E402
import jax.numpy as jnp  # noqa: E402

orig = A.imag_loss


def imag_loss(act, rew, con, policy, value, slowvalue, *a, **k):
    losses, out, mets = orig(act, rew, con, policy, value, slowvalue, *a, **k)
    v, lg, p = value.pred(), value.logits, value.probs
    mets = dict(mets)
    mets["x_rew_abs"], mets["x_rew_std"] = jnp.abs(rew).mean(), rew.std()
    mets["x_val_abs"], mets["x_val_std"] = jnp.abs(v).mean(), v.std()
    mets["x_con_std"] = con.std()
    mets["x_val_logit_asym"] = jnp.abs(lg[..., :127] - lg[..., 128:][..., ::-1]).max()
    mets["x_val_logit_absmax"] = jnp.abs(lg).max()
    mets["x_val_logit_outer_asym"] = jnp.abs(lg[..., :100] - lg[..., 155:][..., ::-1]).max()
    mets["x_val_prob_outer_asym"] = jnp.abs(p[..., :100] - p[..., 155:][..., ::-1]).max()
    return losses, out, mets


A.imag_loss = imag_loss
import official_entry  # noqa: E402

official_entry.main(sys.argv[1:])
