"""M_sa on novel games: does MUSE-LLM's self-awareness model tell won from lost chunks of games it never saw?

Why: paper 000 §4.2.2 scores M_sa on novel tasks. Algorithm 3's `train-sa` stage scores it leave-one-game-out
on the collection's own train games (`unseen_games` in its metrics); this script scores it on games of
another split, played by another run: M_sa trained once on a kept collection (`alfworld-pipeline --stage
collect` folder: the agent's own episodes on train games) scores every 4-step chunk of a kept `muse-llm run`
folder on held-out games (e.g. ReAct on the 20 eval_out_of_distribution games of the study; several folders
are pooled and their chunks resampled by game, so two agents' runs on the same games make one larger test
set). Beside it, on the same chunks: the no-training loop control (`training.self_awareness.loop_control`)
and the ablations without the task input and without any input (`VARIANTS`), each with a 95% interval from
resampling the held-out games and its difference from the control, paired on the same resampled games. The
collection's leave-one-game-out figures are recomputed with the same ablations. The last line printed is one JSON
object; `--out` appends it to a JSON lines file that the held-out page renders.

    python benchmarks/msa_novel.py --collect docs/llm/alg3/qwen1.5b/collect \\
        --heldout docs/llm/alfworld_heldout/react-qwen1.5b --out docs/llm/msa_novel.jsonl
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record, git_commit  # noqa: E402


def _run_facts(*folders: Path) -> dict[str, Any]:
    """The agent and model the folders' `run.json` files name, distinct values joined by ' + ' (a key is left
    out where no folder's file names it, or a file is missing or malformed)."""
    from muse_common.files import RunFileError, read_json_object

    found: dict[str, list[str]] = {"agent": [], "model": []}
    for folder in folders:
        try:
            run = read_json_object(folder / "run.json", "a run's settings file", "rerun the command that made it")
        except (OSError, RunFileError):
            continue
        for key, values in found.items():
            if isinstance(run.get(key), str) and run[key] not in values:
                values.append(run[key])
    return {key: " + ".join(values) for key, values in found.items() if values}


def read_folders(collect: Path, heldout: Sequence[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The finished episodes of the collection and of the held-out folders (pooled), checked before any model
    loads: each folder holds some, a folder is given once, and no held-out game is a train game (it would not
    be novel). Raises one-line errors (a malformed record: `RecordError`)."""
    from llm_side.harness.records import load_records
    from llm_side.training.self_awareness import check_novel

    if len({f.resolve() for f in heldout}) < len(heldout):
        raise ValueError("a --heldout folder is given twice; its episodes would count twice")

    def finished(folder: Path) -> list[dict[str, Any]]:
        recs = load_records(folder)
        if not recs:
            raise ValueError(f"{folder} holds no finished episode (no episodes.jsonl records); give a kept run folder")
        return recs

    train, test = finished(collect), []
    for folder in heldout:
        recs = finished(folder)
        check_novel(train, recs, train_from=str(collect), test_from=str(folder))
        test.extend(recs)
    return train, test


def measure(collect: Path, heldout: Path | Sequence[Path], embedder: Any, *, epochs: int = 30, seed: int = 0,
            records: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The record: M_sa trained on `collect`'s episodes, scored on the games of `heldout` (one folder or
    several, pooled) and left-one-out (`records`: the folders' episodes when already read by `read_folders`).
    `heldout` in the record is the folders as the command line gives them (space-separated)."""
    from llm_side.training.self_awareness import leave_one_game_out, novel_games

    heldout = [heldout] if isinstance(heldout, Path) else list(heldout)
    train, test = records or read_folders(collect, heldout)
    start = time.perf_counter()
    novel = novel_games(train, test, embedder, epochs=epochs, seed=seed)
    loo = leave_one_game_out(train, embedder, epochs=epochs, seed=seed)
    return {"benchmark": "msa_novel", "collect": str(collect), "collect_run": _run_facts(collect),
            "heldout": " ".join(str(f) for f in heldout), "heldout_run": _run_facts(*heldout),
            "embedder": getattr(embedder, "name", "?"),
            "epochs": epochs, "seed": seed, "novel_games": novel, "train_games_left_out": loo,
            "seconds": round(time.perf_counter() - start, 1), "commit": git_commit(),
            "date": time.strftime("%Y-%m-%d")}


def main(argv: list[str] | None = None) -> int:
    from llm_side.backends import load_embedder
    from muse_common.arg_parser import ArgumentParser, path_text_arg
    from muse_common.files import RunFileError

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collect", type=path_text_arg, required=True,
                   help="a kept `alfworld-pipeline --stage collect` folder (M_sa trains on its episodes)")
    p.add_argument("--heldout", type=path_text_arg, required=True, nargs="+",
                   help="kept `muse-llm run` folders on other games (M_sa scores their chunks, pooled)")
    p.add_argument("--epochs", type=int, default=30, help="M_sa training epochs (train-sa's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--embedder", default=None, help="sentence encoder folder (default: the packaged MiniLM)")
    p.add_argument("--out", default=None, help="also append the JSON record to this JSON lines file")
    args = p.parse_args(argv)
    try:
        collect, heldout = Path(args.collect), [Path(h) for h in args.heldout]
        records = read_folders(collect, heldout)
        record = measure(collect, heldout, load_embedder(args.embedder), epochs=args.epochs, seed=args.seed,
                         records=records)
    except (ValueError, OSError, RunFileError) as err:  # RecordError is a ValueError
        print(f"msa_novel: error: {err}", file=sys.stderr)
        return 2
    emit_record(record, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
