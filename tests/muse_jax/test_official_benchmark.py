"""benchmarks/official: the official DreamerV3 runner's log conversion, and a tiny official run.

The tiny run needs the official environment (`bash benchmarks/official/setup.sh` -> .official/venv);
CI does not build it, so that test skips there and says so.
"""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.official import run as official
from muse_common.files import read_jsonl

BUDGET = {"size": "size1m", "train_ratio": 32, "batch": 16, "seq_len": 64, "num_envs": 2, "action_repeat": 2,
          "episode_frames": 1000, "env_steps_total": 1000, "prefill": 0}


def rows_of(path) -> list[dict]:
    return list(read_jsonl(path))


def _event(step, score, success=None, train=0, wall=0.0):
    return {"env_steps": step, "worker": 0, "score": score, "success": success, "length": 10,
            "train_steps": train, "wall_s": wall}


def _lines(events, finished, log_every=300, budget=BUDGET):
    return official.events_to_lines(events, suite="dmc", task="cartpole-swingup", seed=3, budget=budget,
                                    log_every=log_every, finished=finished, machine="m", commit="c")


def test_windows_average_the_episodes_that_ended_in_them():
    events = [_event(100, 1.0, train=1, wall=1), _event(250, 3.0, train=2, wall=2), _event(301, 10.0, train=5, wall=3),
              _event(950, 7.0, train=9, wall=4)]
    lines = _lines(events, finished=True)
    assert [ln["env_steps"] for ln in lines] == [300, 600, 900, 1000]  # the last window is capped at the total
    assert [ln["score"] for ln in lines] == [2.0, 10.0, None, 7.0]
    assert [ln["episodes"] for ln in lines] == [2, 1, 0, 1]
    assert [ln["train_steps"] for ln in lines] == [2, 5, 5, 9]
    assert all(ln["frames"] == 2 * ln["env_steps"] for ln in lines)
    first = lines[0]
    assert first["impl"] == "official" and first["agent"] == "dreamer" and first["seed"] == 3
    assert first["success_rate"] is None and first["official_version"] == "dreamer==3.3.1"
    assert first["budget"] == BUDGET


def test_unfinished_run_emits_only_complete_windows():
    events = [_event(100, 1.0), _event(301, 10.0), _event(599, 4.0)]
    assert [ln["env_steps"] for ln in _lines(events, finished=False)] == [300]  # 600 not passed yet
    assert _lines([], finished=False) == []


def test_success_rate_counts_only_episodes_with_a_success_signal():
    events = [_event(10, 0.0, success=True), _event(20, 0.0, success=False), _event(30, 0.0, success=False)]
    (line,) = _lines(events, finished=True, log_every=1000)
    assert math.isclose(line["success_rate"], 1 / 3)


def test_appending_twice_adds_no_duplicate(tmp_path):
    out = tmp_path / "dmc_cartpole-swingup.jsonl"
    out.write_text(json.dumps({"impl": "muse_jax", "seed": 3, "env_steps": 300}) + "\n")
    lines = _lines([_event(100, 1.0), _event(700, 2.0)], finished=True)
    assert official.append_new(out, lines) == len(lines)
    assert official.append_new(out, lines) == 0
    rows = rows_of(out)
    assert len(rows) == 1 + len(lines)
    assert len({(r["impl"], r["seed"], r["env_steps"]) for r in rows}) == len(rows)


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps(_event(5, 1.0)) + "\n" + '{"env_steps": 9, "sco')
    assert [r["env_steps"] for r in rows_of(path)] == [5]


def test_bad_log_every_is_refused():
    with pytest.raises(ValueError, match="log_every"):
        _lines([], finished=True, log_every=0)


@pytest.mark.skipif(official.official_available() is not None,
                    reason=f"{official.official_available()} (CI does not build the official DreamerV3 environment)")
def test_tiny_official_run_writes_curve_lines_and_resumes_without_duplicates(tmp_path, capsys):
    argv = ["--suite", "gym", "--task", "Pendulum-v1", "--seeds", "0", "--env-steps", "300", "--log-every", "100",
            "--episode-frames", "100", "--num-envs", "1", "--batch", "4", "--seq-len", "16", "--poll-s", "2",
            "--out-dir", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs")]
    summary = official.main(argv)
    assert summary["runs"][0]["ok"], summary
    rows = rows_of(tmp_path / "out" / "gym_Pendulum-v1.jsonl")
    assert [r["env_steps"] for r in rows] == [100, 200, 300]
    # Pendulum's reward is in [-16.3, 0] per frame: 100-frame episodes score in [-1630, 0].
    scores = [r["score"] for r in rows if r["score"] is not None]
    assert scores and all(-1700 < s <= 0 for s in scores)
    assert rows[-1]["train_steps"] > 0 and rows[-1]["budget"]["episode_frames"] == 100
    assert all(r["impl"] == "official" and r["frames"] == 2 * r["env_steps"] for r in rows)
    official.main(argv)  # finished: a rerun adds nothing
    assert len(rows_of(tmp_path / "out" / "gym_Pendulum-v1.jsonl")) == 3
    # a longer budget resumes the finished seed from its checkpoint; the new window holds new episodes
    longer = official.main([*argv[:argv.index("--env-steps") + 1], "400", *argv[argv.index("--env-steps") + 2:]])
    rows = rows_of(tmp_path / "out" / "gym_Pendulum-v1.jsonl")
    assert longer["runs"][0]["ok"] and [r["env_steps"] for r in rows] == [100, 200, 300, 400]
    assert rows[-1]["episodes"] >= 1 and rows[-1]["train_steps"] > rows[2]["train_steps"]


def test_budget_file_sets_the_shared_keys_and_the_official_prefill_stays_zero(tmp_path):
    path = tmp_path / "budget.json"
    path.write_text(json.dumps({"size": "size12m", "train_ratio": 64, "env_steps_total": 20000, "prefill": 1024,
                                "seeds": [4], "log_every": 2500}))
    budget = official.load_budget(path)
    assert (budget["size"], budget["train_ratio"], budget["env_steps_total"]) == ("size12m", 64, 20000)
    assert budget["seeds"] == [4] and budget["log_every"] == 2500
    assert budget["prefill"] == 0  # the official code acts with its untrained policy, never at random


def test_unreadable_budget_file_is_one_clear_error(tmp_path):
    path = tmp_path / "budget.json"
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="--budget-json .*JSON"):
        official.load_budget(path)


def test_official_command_carries_the_budget():
    budget = dict(BUDGET, log_every=300)
    cmd = official.official_command(official.Path("py"), official.Path("src"), "dmc", "reacher-easy", 1, budget,
                                    official.Path("log"), official.Path("ev.jsonl"))
    flags = dict(zip(cmd, cmd[1:], strict=False))
    assert flags["--run.train_ratio"] == "32.0" and flags["--batch_size"] == "16" and flags["--batch_length"] == "64"
    assert flags["--run.envs"] == "2" and flags["--run.steps"] == "1000" and flags["--repeat"] == "2"
    assert flags["--jax.platform"] == "cpu" and flags["--seed"] == "1" and "size1m" in cmd


FAKE_OFFICIAL = """
import json, sys
steps, events = int(sys.argv[1]), sys.argv[2]
have = [json.loads(x) for x in open(events)] if __import__('os').path.exists(events) else []
start = have[-1]["env_steps"] if have else 0
with open(events, "a") as f:
    for step in range(start + 100, steps + 1, 100):  # one 100-step episode per 100 agent steps, resuming
        f.write(json.dumps({"env_steps": step, "worker": 0, "score": float(step), "success": None,
                            "length": 100, "train_steps": step // 10, "wall_s": step / 100}) + "\\n")
"""


def test_a_longer_budget_resumes_a_finished_seed_without_empty_windows(tmp_path, monkeypatch):
    """A seed finished at 300 steps, asked again for 500: the runner resumes it (not 'done'), and the new
    windows hold the new episodes; a legacy done.json without its budget is read from its last window."""
    script = tmp_path / "fake_official.py"
    script.write_text(FAKE_OFFICIAL)
    monkeypatch.setattr(official, "official_available", lambda venv=None: None)
    monkeypatch.setattr(official, "official_command",
                        lambda python, src, suite, task, seed, budget, logdir, events, save_every_s=300, variant=None:
                        [official.sys.executable, str(script), str(budget["env_steps_total"]), str(events)])

    def run(steps):
        return official.main(["--suite", "gym", "--task", "Pendulum-v1", "--seeds", "0", "--env-steps", str(steps),
                              "--log-every", "100", "--poll-s", "0.1", "--out-dir", str(tmp_path / "out"),
                              "--runs-dir", str(tmp_path / "runs")])

    out = tmp_path / "out" / "gym_Pendulum-v1.jsonl"
    done = tmp_path / "runs" / "gym_Pendulum-v1" / "seed0" / "done.json"
    assert run(300)["runs"][0]["ok"] and json.loads(done.read_text())["env_steps_total"] == 300
    rows = rows_of(out)
    assert [(r["env_steps"], r["score"]) for r in rows] == [(100, 100.0), (200, 200.0), (300, 300.0)]
    summary = run(500)
    assert summary["runs"][0]["ok"] and summary["final_scores"] == {0: 500.0}
    assert [(r["env_steps"], r["score"]) for r in rows_of(out)][3:] == [(400, 400.0), (500, 500.0)]
    assert run(500)["runs"][0] == json.loads(done.read_text())  # finished at this budget: nothing reruns
    legacy = {k: v for k, v in json.loads(done.read_text()).items() if k != "env_steps_total"}
    done.write_text(json.dumps(legacy))
    assert run(500)["runs"][0] == legacy and len(rows_of(out)) == 5


def test_finished_budget_of_a_legacy_summary_is_its_last_window():
    events = [_event(1900, 1.0), _event(4000, 2.0)]
    assert official.finished_budget({}, events, 2000) == 4000
    assert official.finished_budget({"env_steps_total": 14000}, events, 2000) == 14000
    assert official.finished_budget({}, [], 2000) == 0


def test_a_venv_of_an_older_setup_recipe_is_refused_with_the_fix(tmp_path):
    """setup.sh's BUILD and run.py's OFFICIAL_BUILD name one recipe; a venv whose marker names another
    (e.g. one with elements >= 3.19, which breaks 3.3.1 on Meta-World's `log/success`) is refused."""
    import re

    setup = (official.REPO / "benchmarks" / "official" / "setup.sh").read_text()
    assert re.search(r"^BUILD=(\S+)", setup, re.M).group(1) == official.OFFICIAL_BUILD
    assert '"elements>=3.17.0,<3.19"' in setup
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    assert "is not built" in official.official_available(venv)
    (venv / ".complete").write_text("")  # a build of the first recipe (an empty marker)
    assert "built by an older setup.sh" in official.official_available(venv)
    assert "rerun bash benchmarks/official/setup.sh" in official.official_available(venv)
    (venv / ".complete").write_text(official.OFFICIAL_BUILD + "\n")
    reason = official.official_available(venv)  # the marker passes; the source may still be absent here
    assert reason is None or reason.startswith("the official source is incomplete"), reason


def test_exact_twohot_mean_is_the_mean_and_exactly_zero_for_mirrored_probabilities():
    import numpy as np

    from benchmarks.official.official_entry import exact_symmetric_twohot_mean

    x = np.linspace(-20.0, 20.0, 255, dtype=np.float32)
    bins = (np.sign(x) * np.expm1(np.abs(x))).astype(np.float32)  # DreamerV3's symexp bins, mirror-symmetric
    assert np.array_equal(bins, -bins[::-1])
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(255), size=64).astype(np.float32)
    exact = (probs.astype(np.float64) * bins.astype(np.float64)).sum(-1)
    got = exact_symmetric_twohot_mean(probs, bins)
    assert np.allclose(got, exact, rtol=1e-4, atol=1e-3 * np.abs(bins).max() / 255)
    uniform = np.full((4, 255), 1 / 255, np.float32)  # a zero-initialised head's softmax
    assert np.all(exact_symmetric_twohot_mean(uniform, bins) == 0.0)
    mirrored = (probs + probs[:, ::-1]) / 2
    assert np.all(exact_symmetric_twohot_mean(mirrored, bins) == 0.0)
    # the same mean summed left to right in float32 is not 0: the rounding the variant removes
    assert np.any(np.cumsum(uniform * bins, axis=-1, dtype=np.float32)[:, -1] != 0.0)
    even = np.array([-3.0, -1.0, 1.0, 3.0], np.float32)  # an even bin count has no middle bin
    assert np.isclose(exact_symmetric_twohot_mean(np.array([0.1, 0.2, 0.3, 0.4], np.float32), even), 1.0)


def test_an_official_variant_is_run_keyed_and_written_apart(tmp_path):
    budget = dict(BUDGET, log_every=300)
    cmd = official.official_command(official.Path("py"), official.Path("src"), "dmc", "cheetah-run", 1, budget,
                                    official.Path("log"), official.Path("ev.jsonl"), variant="exact-twohot")
    assert cmd.index("--exact-twohot") < cmd.index("--")  # a flag of official_entry.py, not of dreamerv3
    ref = official.official_command(official.Path("py"), official.Path("src"), "dmc", "cheetah-run", 1, budget,
                                    official.Path("log"), official.Path("ev.jsonl"))
    assert "--exact-twohot" not in ref
    out = tmp_path / "dmc_cheetah-run.jsonl"
    events = [_event(100, 1.0), _event(700, 2.0)]
    assert official.append_new(out, _lines(events, finished=True)) == 4
    variant = official.events_to_lines(events, suite="dmc", task="cheetah-run", seed=3, budget=BUDGET,
                                       log_every=300, finished=True, machine="m", commit="c", variant="exact-twohot")
    assert all(ln["variant"] == "exact-twohot" for ln in variant)
    assert official.append_new(out, variant) == 4  # same seed and windows, another series
    assert official.append_new(out, variant) == 0
    with pytest.raises(SystemExit):
        official.parse_args(["--suite", "dmc", "--task", "cheetah-run", "--variant", "no-such-variant"])
