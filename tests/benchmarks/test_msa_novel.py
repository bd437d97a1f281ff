"""benchmarks/msa_novel.py: M_sa trained on one kept folder, scored on another's games; bad folders in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks import msa_novel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "llm_side"))
from test_muse_agent import BowEmbedder  # noqa: E402


def _episode(task: str, episode: int, won: bool) -> dict:
    word = "key" if won else "rock"
    return {"env": "alfworld", "agent": "react", "task": task, "episode": episode, "success": won, "steps": 8,
            "task_text": f"put a thing {task}",
            "actions": [f"go to place {i}" for i in range(8)], "observations": [f"You see a {word}."] * 8}


def _folder(root: Path, name: str, games: list[str], agent: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"agent": agent, "model": "openai:http://127.0.0.1:8093/v1:q"}))
    (folder / "episodes.jsonl").write_text("".join(
        json.dumps(_episode(g, k, won)) + "\n" for g in games for k, won in enumerate((True, False))))
    return folder


def test_a_record_scores_novel_games_and_the_collection_left_out(tmp_path: Path) -> None:
    collect = _folder(tmp_path, "collect", [f"train/t{i}" for i in range(4)], "reflexion")
    heldout = _folder(tmp_path, "heldout", [f"valid_unseen/n{i}" for i in range(3)], "react")
    record = msa_novel.measure(collect, heldout, BowEmbedder(), epochs=30)
    assert record["benchmark"] == "msa_novel" and record["heldout_run"]["agent"] == "react"
    novel = record["novel_games"]
    assert (novel["games"], novel["chunks"], novel["positive"]) == (3, 12, 6)
    assert novel["msa"]["auroc"] > 0.9 and novel["control"]["auroc"] == 0.5
    assert set(record["train_games_left_out"]) >= {"msa", "msa_without_task", "msa_without_input", "control"}


def test_several_heldout_folders_are_pooled_and_resampled_by_game(tmp_path: Path) -> None:
    """Two agents' runs on the same games: one test set, a game's chunks from both runs in one cluster, both
    agents named; a folder given twice is refused (its episodes would count twice)."""
    collect = _folder(tmp_path, "collect", [f"train/t{i}" for i in range(4)], "reflexion")
    games = [f"valid_unseen/n{i}" for i in range(3)]
    react, reflexion = _folder(tmp_path, "react", games, "react"), _folder(tmp_path, "reflexion", games, "reflexion")
    record = msa_novel.measure(collect, [react, reflexion], BowEmbedder(), epochs=30)
    novel = record["novel_games"]
    assert (novel["games"], novel["episodes"], novel["chunks"]) == (3, 12, 24)
    assert record["heldout"] == f"{react} {reflexion}" and record["heldout_run"]["agent"] == "react + reflexion"
    assert record["heldout_run"]["model"] == "openai:http://127.0.0.1:8093/v1:q"
    try:
        msa_novel.read_folders(collect, [react, react])
    except ValueError as err:
        assert "given twice" in str(err)
    else:
        raise AssertionError("a folder given twice was read")


def test_a_missing_or_shared_folder_is_one_line(tmp_path: Path, capsys) -> None:
    collect = _folder(tmp_path, "collect", ["train/t0", "train/t1"], "reflexion")
    assert msa_novel.main(["--collect", str(collect), "--heldout", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no finished episode" in err[0]
    assert msa_novel.main(["--collect", str(collect), "--heldout", str(collect)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "also train games" in err[0]
    (collect / "episodes.jsonl").write_text('{"task": 5}\n')
    assert msa_novel.main(["--collect", str(collect), "--heldout", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 1 is not an episode record" in err[0]
