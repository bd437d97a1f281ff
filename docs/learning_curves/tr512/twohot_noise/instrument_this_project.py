"""This project's benchmarks/learning_curve.py run, with the same extra metrics as instrument_official.py.

Adds `x_*` keys to every logged train step (the run folder's `metrics.jsonl`): mean absolute imagined
reward and critic value and their spread. Same arguments as learning_curve.py:

    .venv/bin/python docs/learning_curves/tr512/twohot_noise/instrument_this_project.py --suite dmc \
        --task cheetah-run --seeds 9 --env-steps 4000 --train-ratio 512 --log-every 2000 --out OUT.jsonl --runs RUNS
"""

import runpy
import sys
from pathlib import Path

import jax.numpy as jnp

from muse_jax import behavior, dists

REPO = Path(__file__).resolve().parents[4]
orig = behavior.actor_critic_losses


def actor_critic_losses(actor, critic, slow_critic, traj, *a, **k):
    losses, mets, outs = orig(actor, critic, slow_critic, traj, *a, **k)
    cfg = a[-1] if a else k["cfg"]
    rew = traj["reward"]
    v = dists.twohot_decode(critic.logits(traj["feat"]), dists.twohot_bins(cfg.model.bins))
    mets = dict(mets, x_rew_abs=jnp.abs(rew).mean(), x_rew_std=rew.std(), x_val_abs=jnp.abs(v).mean(),
                x_val_std=v.std(), x_con_std=traj["cont"].std())
    return losses, mets, outs


behavior.actor_critic_losses = actor_critic_losses
sys.argv = ["learning_curve.py", *sys.argv[1:]]
runpy.run_path(str(REPO / "benchmarks" / "learning_curve.py"), run_name="__main__")
