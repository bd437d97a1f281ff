"""benchmarks/novel_fraction.py and its page: arms, committed lines from run folders, paired reading."""

from __future__ import annotations

import json

import numpy as np

from benchmarks import novel_fraction as NF
from benchmarks import pages


def _run(folder, rng, *, separates: bool, seed: int):
    """An adapt folder as `muse-wm adapt` leaves it: results.json and episodes.jsonl (2 tasks x 20)."""
    folder.mkdir(parents=True)
    eps = []
    for task in ("a", "b"):
        for i in range(20):
            success, noise = bool(rng.random() < 0.3), float(rng.random())  # the same draws whether it separates
            level = (0.8 if success else 0.2) if separates and i >= 10 else noise
            eps.append({"task": task, "episode": i, "success": success, "time_to_success": 3 if success else -1,
                        "length": 5, "signal": [5 * level] * 5, "psi1": [level] * 5})
    (folder / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    (folder / "results.json").write_text(json.dumps({
        "agent": "muse", "max_steps": 75, "success_rate": 0.3, "sa_auroc": 0.6, "sa_accuracy": 0.7,
        "sa_quantile_accuracy": 0.6, "episodes": 40,
        "tasks": [{"task": "a"}, {"task": "b"}],
        "sa_by_episode_index": [{"half": "late", "episodes": 20, "sa_auroc": 0.9 if separates else 0.5}]}))


def test_arm_settings_name_the_mix_and_seed():
    assert NF.arm_settings("uniform", 3) == ["--set", "train.seed=3"]
    assert NF.arm_settings("novel_fraction_0.5", 1) == ["--set", "train.seed=1", "--set",
                                                       "adapt.novel_fraction=0.5"]


def test_page_pairs_the_arms_and_reads_the_late_half(tmp_path, monkeypatch):
    import functools

    from benchmarks import table1 as T

    monkeypatch.setattr(T, "DRAWS", 200)  # the page's intervals, cheaper
    monkeypatch.setattr(T, "bootstrap", functools.partial(T.bootstrap, draws=200))
    rng = np.random.default_rng(0)
    docs = tmp_path / "docs"
    (docs / "novel_fraction").mkdir(parents=True)
    out = docs / "novel_fraction" / "quickstart.jsonl"
    with out.open("w") as f:
        for seed in (0, 1, 2):
            for arm, separates in (("uniform", False), ("novel_fraction_0.5", True)):
                folder = tmp_path / f"{arm}_{seed}"
                _run(folder, np.random.default_rng(seed), separates=separates, seed=seed)
                line = NF.line_from_run(folder, arm=arm, seed=seed, checkpoint="ck", wall_s=1)
                assert len(line["episodes_records"]) == 40 and line["episodes_records"][0]["seed"] == seed
                f.write(json.dumps(line) + "\n")
    del rng
    page = pages.novel_fraction_page(docs)
    assert "## quickstart: 3 adaptation seed(s)" in page
    # same successes in both arms (same rng per seed): the head separates only under the 0.5 mix, late half
    assert "So the mix changes how well the head ranks the late episodes" in page
    assert "does not measurably change what the agent achieves" in page


def test_a_run_folder_of_another_checkpoint_is_refused_not_counted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "runs" / "uniform_seed0"
    _run(folder, np.random.default_rng(0), separates=False, seed=0)  # finished: results.json is there
    (folder / "adapt.json").write_text(json.dumps({"agent": "muse", "checkpoint": str(tmp_path / "other")}))
    assert NF.foreign_run(folder, "other") is None  # the same checkpoint, given relative to the cwd
    out = tmp_path / "lines.jsonl"
    rc = NF.main(["--checkpoint", "mine", "--seeds", "0", "--arms", "uniform", "--runs", "runs",
                  "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and "another checkpoint" in err and "--runs" in err
    (folder / "adapt.json").write_text("[1, 2]")  # not a settings file: refused as well, in one line
    assert "not an adapt run's settings file" in NF.foreign_run(folder, "mine")


def test_page_pools_checkpoints_pairing_each_seed_only_with_itself(tmp_path, monkeypatch):
    import functools

    from benchmarks import table1 as T

    monkeypatch.setattr(T, "DRAWS", 200)
    monkeypatch.setattr(T, "bootstrap", functools.partial(T.bootstrap, draws=200))
    docs = tmp_path / "docs"
    (docs / "novel_fraction").mkdir(parents=True)
    for name, separates in (("ck_a", True), ("ck_b", False)):
        if name == "ck_a":  # the checkpoint's own pre-training log, read into each line
            (tmp_path / "runs" / name).mkdir(parents=True)
            (tmp_path / "runs" / name / "metrics.jsonl").write_text(json.dumps(
                {"step": 8000, "sa/episodes": 64.0, "sa/successes": 0.0, "sa/outcome_classes": 1.0,
                 "sa/auroc": None}) + "\n")
        with (docs / "novel_fraction" / f"{name}.jsonl").open("w") as f:
            for seed in (0, 1):
                for arm in ("uniform", "novel_fraction_0.5"):
                    folder = tmp_path / name / f"{arm}_{seed}"
                    # each checkpoint's own successes, the same in both arms of one (checkpoint, seed)
                    rng = np.random.default_rng(seed + 10 * (name == "ck_b"))
                    _run(folder, rng, separates=separates and arm != "uniform", seed=seed)
                    f.write(json.dumps(NF.line_from_run(folder, arm=arm, seed=seed,
                                                        checkpoint=str(tmp_path / "runs" / name), wall_s=1)) + "\n")
    page = pages.novel_fraction_page(docs)
    assert f"`{tmp_path / 'runs' / 'ck_a'}` (its last pre-training window, step 8,000: 64 episodes, " \
        "0 successes, AUROC undefined (one outcome class))" in page
    assert "## ck_a: 2 adaptation seed(s)" in page and "## ck_b: 2 adaptation seed(s)" in page
    assert "--runs runs/novel_fraction/ck_b" in page  # one runs folder per checkpoint
    assert "read it with the other checkpoints" in page and "One checkpoint and few seeds" not in page
    pooled = page.split("## All checkpoints pooled: 2 checkpoints, 4 paired runs")[1]
    # 2 checkpoints x 2 seeds x 40 episodes per arm: seeds 0 and 1 of the two checkpoints are kept apart
    assert "| `uniform` | " in pooled and "/160 |" in pooled and " 160 paired episodes" in pooled
    assert f"`{tmp_path / 'runs' / 'ck_a'}`" in pooled and "`docs/novel_fraction/ck_b.jsonl`" in pooled
    # paired with its own uniform run, no episode's success differs; paired across checkpoints, some would
    assert "`novel_fraction_0.5` alone 0, `uniform` alone 0" in pooled
    assert "excludes zero for 1 of the 2 checkpoints" in pooled  # ck_a's head separates, ck_b's does not
    # a seed that one arm lacks yet (a study under way) is left out of both, not counted unpaired
    with (docs / "novel_fraction" / "ck_b.jsonl").open("a") as f:
        line = json.loads((docs / "novel_fraction" / "ck_b.jsonl").read_text().splitlines()[0])
        f.write(json.dumps({**line, "seed": 7}) + "\n")
    assert "## ck_b: 2 adaptation seed(s)" in pages.novel_fraction_page(docs)
