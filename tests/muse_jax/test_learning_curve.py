"""benchmarks/learning_curve.py: a tiny real run writes CURVES-format JSON lines and a PNG, a rerun adds no
duplicate, the published DMC curve is converted from frames to agent steps, and bad input is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "learning_curve.py"
LINE_KEYS = {"impl", "agent", "suite", "task", "seed", "env_steps", "frames", "score", "success_rate", "episodes",
             "train_steps", "wall_s", "budget", "machine", "commit"}
BUDGET_KEYS = {"size", "train_ratio", "batch", "seq_len", "num_envs", "action_repeat", "episode_frames",
               "env_steps_total", "prefill"}


def _run(*flags: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


TINY = ("--suite", "gym", "--task", "Pendulum-v1", "--seeds", "0", "--env-steps", "240", "--episode-frames", "40",
        "--num-envs", "2", "--size", "nano", "--batch", "4", "--seq-len", "8", "--train-ratio", "8",
        "--prefill", "80", "--log-every", "80", "--random-episodes", "2",
        "--set", "model.bins=31", "--set", "model.mlp_layers=1",
        "--harvest-every-s", "0.2")  # windows are also appended while the seed trains, and counted


@pytest.mark.slow
def test_tiny_curve_writes_lines_and_png_and_rerun_adds_nothing(tmp_path):
    out, runs = tmp_path / "gym_Pendulum-v1.jsonl", tmp_path / "runs"
    proc = _run(*TINY, "--out", str(out), "--runs", str(runs))
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(LINE_KEYS <= set(x) and BUDGET_KEYS <= set(x["budget"]) for x in lines)
    assert all(x["network"] == {"hidden_bias": True} for x in lines if x["impl"] == "muse_jax")
    rand = [x for x in lines if x["impl"] == "random"]
    mine = [x for x in lines if x["impl"] == "muse_jax"]
    assert len(rand) == 1 and rand[0]["episodes"] == 2 and rand[0]["score"] < 0  # Pendulum returns are negative
    assert [x["env_steps"] for x in mine] == [80, 160, 240]
    assert all(x["frames"] == x["env_steps"] and x["success_rate"] is None for x in mine)  # gym: repeat 1, no success
    # DreamerV3's start: training begins once replay holds one batch (the first finished 40-step episodes of
    # the 2 envs, env step 80) and follows the ratio from there, with no burst for the steps before it
    assert mine[-1]["train_steps"] == (240 - 80) * 8 // (4 * 8) and mine[-1]["wall_s"] > 0
    scored = [x for x in mine if x["score"] is not None]
    assert scored and all(x["episodes"] >= 1 and x["score"] < 0 for x in scored)  # 40-step episodes ended
    assert summary["lines_written"] == len(lines) and summary["plot"] == str(out.with_suffix(".png"))
    assert out.with_suffix(".png").stat().st_size > 5000
    # the same command again: every seed is finished, nothing is appended
    proc = _run(*TINY, "--out", str(out), "--runs", str(runs))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["lines_written"] == 0
    assert [json.loads(x) for x in out.read_text().splitlines()] == lines
    # a named variant (the official's data pipeline and biases) trains in its own folder; its lines are
    # keyed apart, carry the overrides, and leave the default agent's lines and the target as they were
    matched = ("--variant", "official-pipeline", "--prefill", "0", "--set", "replay.online=true",
               "--set", "model.hidden_bias=true")
    proc = _run(*TINY, *matched, "--out", str(out), "--runs", str(runs))
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary_v = json.loads(proc.stdout.strip().splitlines()[-1])
    after = [json.loads(x) for x in out.read_text().splitlines()]
    assert after[:len(lines)] == lines and (runs / "dreamer-official-pipeline_seed0" / "checkpoints").is_dir()
    variant = after[len(lines):]
    assert [x["env_steps"] for x in variant] == [80, 160, 240]
    assert all(x["variant"] == "official-pipeline" and "replay.online=true" in x["overrides"]
               and x["budget"]["prefill"] == 0 for x in variant)
    assert summary_v["variant"] == "official-pipeline" and summary_v["target"] == summary["target"]
    # a resume with another config is refused in one line naming the key, and the file is left as it was
    changed = [*TINY[:TINY.index("--train-ratio") + 1], "16", *TINY[TINY.index("--train-ratio") + 2:]]
    proc = _run(*changed, "--out", str(out), "--runs", str(runs), timeout=300)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert err[-1].startswith("learning_curve: error: seed 0:") and "train_ratio" in err[-1], err[-1]
    # --plot-only summarises the runs as trained, not the command's defaults (--env-steps 50000), and
    # refuses flags that describe another run, since it would label the run's windows with them
    i = TINY.index("--env-steps")
    proc = _run(*TINY[:i], *TINY[i + 2:], "--plot-only", "--out", str(out), "--runs", str(runs), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plot_only = json.loads(proc.stdout.strip().splitlines()[-1])
    assert plot_only["env_steps"] == plot_only["budget"]["env_steps_total"] == 240 and plot_only["seeds"] == [0]
    proc = _run(*changed, "--plot-only", "--out", str(out), "--runs", str(runs), timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "train_ratio" in proc.stderr and "--plot-only" in proc.stderr.strip().splitlines()[-1]
    assert [json.loads(x) for x in out.read_text().splitlines()] == after
    # a seed folder another process is writing: one line naming that process, nothing trained or written
    from muse_common.run_lock import run_folder_lock

    with run_folder_lock(runs / "dreamer_seed0"):
        proc = _run(*TINY, "--out", str(out), "--runs", str(runs), timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "in use by PID" in proc.stderr.strip().splitlines()[-1] and "--runs" in proc.stderr
    assert [json.loads(x) for x in out.read_text().splitlines()] == after


def test_published_dmc_curve_is_in_agent_steps(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    (tmp_path / "dreamerv3_dmc_proprio.csv").write_text(
        "task,seed,step,score\ncartpole_swingup,0,10000,50\ncartpole_swingup,1,10000,70\n"
        "cartpole_swingup,0,100000,600\nreacher_easy,0,10000,2\n")
    monkeypatch.setattr(lc, "PUBLISHED_DIR", tmp_path)
    values, label = lc.published_curve("dmc", "cartpole-swingup")
    assert values == {5000: [50.0, 70.0], 50000: [600.0]}  # frames / action repeat 2
    assert "frames / 2" in label
    assert lc.published_curve("gym", "Pendulum-v1") is None


def test_runs_far_below_the_published_curve_get_a_panel_on_their_own_scale(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    (tmp_path / "dreamerv3_dmc_proprio.csv").write_text(
        "task,seed,step,score\ncheetah_run,0,10000,20\ncheetah_run,0,20000,300\n")
    monkeypatch.setattr(lc, "PUBLISHED_DIR", tmp_path)
    rand = {**_line("random", 0, 0, 7.0), "score_max": 12.0}
    low = tmp_path / "low.jsonl"
    low.write_text("".join(json.dumps(x) + "\n" for x in (rand, _line("muse_jax", 0, 2000, 8.0),
                                                         _line("muse_jax", 0, 10000, 15.0))))
    assert lc.plot(low, tmp_path / "low.png", "dmc", "cheetah-run") == 2  # 300 > 3 x 15
    high = tmp_path / "high.jsonl"
    high.write_text("".join(json.dumps(x) + "\n" for x in (rand, _line("muse_jax", 0, 10000, 150.0))))
    assert lc.plot(high, tmp_path / "high.png", "dmc", "cheetah-run") == 1  # 300 < 3 x 150
    assert lc.plot(high, tmp_path / "gym.png", "gym", "Pendulum-v1") == 1  # no published curve
    assert (tmp_path / "low.png").stat().st_size > (tmp_path / "high.png").stat().st_size
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({**rand, "score": None}) + "\n")
    assert lc.plot(empty, tmp_path / "empty.png", "dmc", "cheetah-run") == 0 and not (tmp_path / "empty.png").exists()


def test_the_seed_band_stops_where_a_seed_stops_and_the_longer_seed_goes_on_alone(tmp_path, monkeypatch):
    """A mean over whichever seeds reach a window would jump to one seed's value where the other ends."""
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    seeds = [_line("muse_jax", 0, 2000, 10.0), _line("muse_jax", 0, 4000, 30.0), _line("muse_jax", 0, 6000, 90.0),
             {**_line("muse_jax", 0, 2000, 20.0), "seed": 1}, {**_line("muse_jax", 0, 4000, 50.0), "seed": 1}]
    grid, mean, lo, hi, n, tails = lc._seed_band(seeds, "score")
    assert (grid, mean, lo, hi, n) == ([2000, 4000], [15.0, 40.0], [10.0, 30.0], [20.0, 50.0], 2)
    assert tails == [[(4000, 30.0), (6000, 90.0)]]  # seed 0 alone after 4k, joined to its own 4k point
    apart = [seeds[0], {**_line("muse_jax", 0, 8000, 5.0), "seed": 1}]  # no window in common: seed by seed
    assert lc._seed_band(apart, "score")[0] == [] and len(lc._seed_band(apart, "score")[5]) == 2
    monkeypatch.setattr(lc, "PUBLISHED_DIR", tmp_path)
    path = tmp_path / "band.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in apart))
    assert lc.plot(path, tmp_path / "band.png", "dmc", "cheetah-run") == 1


def test_a_success_plot_gets_a_score_panel_beside_it(tmp_path, monkeypatch):
    """Meta-World windows hold 8 episodes: the success rate moves in eighths, so the scores go beside it."""
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    monkeypatch.setattr(lc, "PUBLISHED_DIR", tmp_path)  # no published Meta-World curve here
    mw = [{**_line("random", 0, 0, 700.0), "success_rate": 0.0},
          {**_line("muse_jax", 0, 2000, 900.0), "success_rate": 0.125},
          {**_line("official", 0, 2000, 3000.0), "success_rate": 0.5}]
    both = tmp_path / "mw.jsonl"
    both.write_text("".join(json.dumps(x) + "\n" for x in mw))
    assert lc.plot(both, tmp_path / "mw.png", "metaworld", "reach-v3") == 2
    only_success = tmp_path / "mw_nosc.jsonl"
    only_success.write_text("".join(json.dumps({**x, "score": None}) + "\n" for x in mw))
    assert lc.plot(only_success, tmp_path / "mw_nosc.png", "metaworld", "reach-v3") == 1
    assert lc.plot(both, tmp_path / "dmc.png", "dmc", "cheetah-run") == 1  # scores are DMC's own metric

@pytest.mark.parametrize("flags,words", [
    (("--suite", "metaworld", "--task", "coffee-buton-v3"), ("coffee-buton-v3", "coffee-button-v3")),
    (("--suite", "dmc", "--task", "cartpole-swingup", "--agent", "muse"), ("--agent dreamer",)),
])
def test_bad_input_is_one_clear_line(tmp_path, flags, words):
    proc = _run(*flags, "--env-steps", "10", "--out", str(tmp_path / "x.jsonl"), "--runs", str(tmp_path / "r"),
                timeout=180)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert not (tmp_path / "x.jsonl").exists()


def _line(impl, seed, step, score):
    return {"impl": impl, "agent": "dreamer" if impl != "random" else "random", "seed": seed, "env_steps": step,
            "score": score, **({"network": {"hidden_bias": True}} if impl == "muse_jax" else {})}


def test_target_is_judged_at_the_last_window_every_seed_of_both_has():
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    rand = {**_line("random", 0, 0, 40.0), "score_max": 100.0}
    lines = [rand, _line("muse_jax", 0, 2000, 150.0), _line("muse_jax", 1, 2000, 130.0),
             _line("muse_jax", 0, 4000, 210.0),  # seed 1 has no 4k value: the final point is 2k
             _line("official", 0, 2000, 170.0), _line("official", 1, 2000, 140.0), _line("official", 1, 4000, 300.0)]
    got = lc.judge_target(iter(lines))  # the file's lines come as a generator
    assert got["env_steps"] == 2000 and got["judged"] and got["target_met"]
    assert got["ours"]["mean"] == 140.0 and got["official"]["spread"] == 30.0  # 140 >= 155 - 30
    ablation = [{**_line("muse_jax", s, 2000, 0.0), "variant": "official-pipeline"} for s in (0, 1)]
    assert lc.judge_target(lines + ablation) == got  # a named variant is not this project's agent
    theirs = [{**_line("official", s, 2000, 0.0), "variant": "exact-twohot"} for s in (0, 1)]
    assert lc.judge_target(lines + theirs) == got  # nor is a variant of the official run the official
    assert lc.line_key(ablation[0]) != lc.line_key(lines[1])
    # runs of the network without hidden biases (written before `network` was recorded, or with the key set
    # off) are a series of their own: never judged as the default, never a duplicate of its windows
    legacy = [{k: v for k, v in _line("muse_jax", s, 2000, 0.0).items() if k != "network"} for s in (0, 1)]
    unbiased = [{**_line("muse_jax", s, 2000, 0.0), "network": {"hidden_bias": False}} for s in (0, 1)]
    assert lc.line_network(legacy[0]) == {"hidden_bias": False} == lc.line_network(unbiased[0])
    assert lc.line_network({**legacy[0], "variant": "hb", "overrides": ["model.hidden_bias=true"]}) == \
        {"hidden_bias": True}
    assert lc.judge_target(lines + legacy) == got == lc.judge_target(lines + unbiased)
    assert lc.line_key(legacy[0]) == lc.line_key(unbiased[0]) != lc.line_key(lines[1])
    off = lc.judge_target(lines + unbiased, network={"hidden_bias": False})
    assert off["ours"]["mean"] == 0.0 and not off["target_met"]
    lines[1]["score"] = 90.0  # seed 0 below the best random episode: not clearly above random
    got = lc.judge_target(lines)
    assert got["ours"]["above_random"] is False and got["target_met"] is False
    lines[1]["score"], lines[4]["score"] = 150.0, 300.0  # official 220 +- 160: 140 still >= 60
    assert lc.judge_target(lines)["target_met"]
    lines[5]["score"] = 290.0  # official 295 +- 10: 140 < 285
    got = lc.judge_target(lines)
    assert got["ours_at_least_official_minus_spread"] is False and got["target_met"] is False
    one_seed = [x for x in lines if x["seed"] == 0]
    got = lc.judge_target(one_seed)
    assert not got["judged"] and "fewer than 2 seeds" in got["reason"] and "target_met" not in got
    assert not lc.judge_target([rand, *[x for x in lines if x["impl"] == "muse_jax"]])["judged"]


def test_a_success_rate_is_above_random_only_when_the_counts_say_so():
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    def rate(impl, seed, k, n=8):
        return {**_line(impl, seed, 12000, None), "success_rate": k / n, "episodes": n}

    rand = {"impl": "random", "agent": "random", "seed": 0, "env_steps": 0, "success_rate": 0.3, "episodes": 10}
    lines = [rand, rate("muse_jax", 0, 3), rate("muse_jax", 1, 3), rate("official", 0, 8), rate("official", 1, 7)]
    got = lc.judge_target(lines, "success_rate")
    assert 0.375 > got["random_bar"]  # a higher rate than random, and still not evidence: 3 of 8 vs 3 of 10
    assert got["ours"]["above_random"] is False and got["target_met"] is False
    assert got["official"]["above_random"] is True and max(got["official"]["p_above_random"]) < 0.05
    lines[1], lines[2] = rate("muse_jax", 0, 8), rate("muse_jax", 1, 8)
    assert lc.judge_target(lines, "success_rate")["target_met"]


def test_more_random_episodes_replace_the_random_line_and_fewer_keep_it(tmp_path):
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    out = tmp_path / "dmc_x.jsonl"
    made = []

    def make(n):
        made.append(n)
        return {"impl": "random", "agent": "random", "seed": 0, "env_steps": 0, "episodes": n, "score": float(n)}

    ours = {"impl": "muse_jax", "agent": "dreamer", "seed": 0, "env_steps": 2000, "score": 5.0}
    assert lc.ensure_random_line(out, 10, make) == 1
    lc.append_new(out, [ours])
    assert lc.ensure_random_line(out, 10, make) == 0 and lc.ensure_random_line(out, 4, make) == 0  # kept
    assert lc.ensure_random_line(out, 100, make) == 1  # replaced in place, the other line kept
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert made == [10, 100] and lines == [make(100), ours]
    assert lc.ensure_random_line(out, 0, make) == 0 and made[-1] == 100


def test_windows_are_harvested_while_a_seed_trains_and_not_after(capsys):
    import threading

    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    calls, twice = [], threading.Event()

    def harvest():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk full")  # one warning line, retried at the next tick
        twice.set()

    def train():
        assert twice.wait(10), "no harvest while training"
        return 12.5

    assert lc.train_and_harvest(train, harvest, 0.01) == 12.5
    done = len(calls)
    threading.Event().wait(0.1)
    assert len(calls) == done >= 2  # the helper stopped with training
    warnings = capsys.readouterr().err.splitlines()
    assert warnings[0] == "learning_curve: warning: the windows so far were not written (disk full); retrying in 0.01 s"

    def crash():
        raise RuntimeError("nan loss")

    with pytest.raises(RuntimeError, match="nan loss"):  # a failed seed is the caller's to report
        lc.train_and_harvest(crash, lambda: None, 0.01)
    assert not [t for t in threading.enumerate() if t.name == "harvest"]


def test_together_trains_every_seed_in_one_call_and_harvests_each(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(REPO))
    import benchmarks.learning_curve as lc

    monkeypatch.setenv("MUSE_JAX_COMPILATION_CACHE", "0")
    trained = []

    def together(cfgs, runs, agent):
        trained.append(([c.train.seed for c in cfgs], [r.name for r in runs], agent))
        return 3.0

    monkeypatch.setattr(lc, "train_seeds_together", together)
    monkeypatch.setattr(lc, "run_lines", lambda run, cfg, args, seed, where, sha: [
        {**_line("muse_jax", seed, 100, 1.0 + seed), "network": lc.network_of(cfg), "success_rate": None}])
    out = tmp_path / "curve.jsonl"
    assert lc.main(["--suite", "gym", "--task", "Pendulum-v1", "--seeds", "0", "1", "--together",
                    "--random-episodes", "0", "--out", str(out), "--runs", str(tmp_path / "runs")]) == 0
    assert trained == [([0, 1], ["dreamer_seed0", "dreamer_seed1"], "dreamer")]
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["lines_written"] == 2 and summary["wall_s_per_seed"] == {"0": 3.0, "1": 3.0}
    assert sorted(json.loads(x)["seed"] for x in out.read_text().splitlines()) == [0, 1]
