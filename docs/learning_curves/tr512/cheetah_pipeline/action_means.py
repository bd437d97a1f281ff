"""Per-episode score and mean action of the runs' own replays, to see when each actor leaves the
untrained policy's zero-mean actions (the action entropy alone does not show it: a near-maximal
entropy allows any mean).

    python docs/learning_curves/tr512/cheetah_pipeline/action_means.py OUT.jsonl \
        official:NAME:runs/official_tr512/dmc_cheetah-run/seed0-exact-twohot \
        muse_jax:NAME:runs/learning_curve_tr512/dmc_cheetah-run/dreamer-official-pipeline_seed0

Official runs are read from `logdir/replay/*.npz` (chunks chained per env stream by their successor id),
this project's from the replay of the newest checkpoint that has one (.venv's python: orbax). One JSON
line per finished episode: impl, run, env, window (k: the env's k-th episode, agent steps 2000k to
2000(k+1) with 4 envs), score, mean clipped action per dimension, mean |action|.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repo root: run as a script from a checkout
from muse_common.files import atomic_write_jsonl  # noqa: E402


def official_episodes(run: Path) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(env, k, rewards, actions) of every finished episode in an official run's replay."""
    files = sorted((run / "logdir" / "replay").glob("*.npz"))
    parts = {f: f.stem.split("-") for f in files}  # time-uuid-successor-length
    by_uuid = {p[1]: f for f, p in parts.items()}
    successors = {p[2] for p in parts.values()}
    heads = [f for f, p in parts.items() if p[1] not in successors]
    out = []
    for env, head in enumerate(sorted(heads)):
        chain, f = [], head
        while f is not None:
            chain.append(np.load(f))
            f = by_uuid.get(parts[f][2])
        rew = np.concatenate([c["reward"] for c in chain])
        act = np.concatenate([c["action"] for c in chain])
        first = np.concatenate([c["is_first"] for c in chain])
        last = np.concatenate([c["is_last"] for c in chain])
        bounds = [*np.flatnonzero(first).tolist(), len(rew)]
        full = bounds[1] - bounds[0]  # DMC episodes have one length; the run may stop before the last is_last
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            if last[b - 1] or b - a == full:
                out.append((env, k, rew[a:b], act[a + 1:b]))  # actions after the first step
    return out


def this_project_episodes(run: Path, envs: int = 4) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    import orbax.checkpoint as ocp

    ck = run / "checkpoints"
    step = max(int(p.name) for p in ck.iterdir() if p.name.isdigit() and (p / "replay").exists())
    rep = ocp.StandardCheckpointer().restore((ck / str(step) / "replay").resolve())
    lengths = np.asarray(rep["episode_lengths"])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return [(i % envs, i // envs, np.asarray(rep["reward"][a:a + n]), np.asarray(rep["action"][a + 1:a + n]))
            for i, (a, n) in enumerate(zip(starts, lengths, strict=True))]


def main() -> None:
    out = Path(sys.argv[1])
    lines = []
    for spec in sys.argv[2:]:
        impl, name, path = spec.split(":", 2)
        read = official_episodes if impl == "official" else this_project_episodes
        for env, k, rew, act in read(Path(path)):
            a = np.clip(act, -1, 1)
            lines.append({"impl": impl, "run": name, "env": env, "window": k, "score": round(float(rew.sum()), 2),
                          "action_mean": np.round(a.mean(0), 3).tolist(),
                          "action_abs": round(float(np.abs(a).mean()), 3)})
    atomic_write_jsonl(out, lines)
    for x in lines:
        print(x["impl"], x["run"], x["window"], x["env"], x["score"], x["action_mean"])


if __name__ == "__main__":
    main()
