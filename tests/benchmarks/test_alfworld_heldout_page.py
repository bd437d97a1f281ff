"""The held-out ALFWorld page: a kept run folder's wins per task type, its interval, and a degenerate result named."""

import json
from pathlib import Path

from benchmarks.pages import LLM_RUNS, alfworld_heldout

GAMES = ["valid_unseen/look_at_obj_in_light-CD-None-DeskLamp-308/trial_T1",
         "valid_unseen/pick_and_place_simple-SaltShaker-None-Drawer-10/trial_T2",
         "valid_unseen/pick_and_place_simple-SoapBottle-None-Toilet-424/trial_T3"]


SERVER = {"engine": "llama.cpp", "model": "qwen1.5b", "threads": 2, "n_ctx": 12288}
CPU = "Intel(R) Xeon(R) Processor (family 6 model 167; amx, avx512, avx2)"


def folder(tmp_path: Path, outcomes: list[bool], made: dict | None = None) -> Path:
    run = tmp_path / LLM_RUNS / "react-qwen1.5b"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({
        "env": "alfworld", "agent": "react", "model": "openai:http://127.0.0.1:8093/v1:qwen1.5b", "seed": 0,
        "episodes": 1, "max_steps": 50, "tasks": GAMES}))
    (run / "episodes.jsonl").write_text("".join(
        json.dumps({"task": task, "success": won, "steps": 12 if won else 50, "time_s": 40.0 if won else 180.0,
                    **(made or {})}) + "\n"
        for task, won in zip(GAMES, outcomes, strict=False)))
    return tmp_path


def test_wins_per_task_type_with_an_interval_and_the_runs_own_games(tmp_path: Path) -> None:
    page = alfworld_heldout(folder(tmp_path, [False, True, False]))
    assert "react with qwen1.5b through a local server won 1 of 3 episodes (95% interval 6% to 79%)." in page
    assert "| look_at_obj_in_light | 1 | 0 | 50.0 |" in page
    assert "| pick_and_place_simple | 2 | 1 | 31.0 |" in page
    assert "degenerate" not in page and "so far" not in page
    assert f"GAMES={','.join(GAMES)}" in page  # not the study's 20: the command names the run's own games
    assert "| pick_and_place_simple | 2 | 1 | 31.0 | 3.5 |".replace("3.5", f"{220 / 62:.1f}") in page
    # no server, processor or date in the records: the page says so instead of guessing them
    assert "muse-llm serve --model qwen1.5b --port 8093 &  # engine and threads: not recorded" in page
    assert "Machine: not recorded (3 episodes); 3 episodes carry no date" in page


def test_the_server_processor_and_days_come_from_the_episodes(tmp_path: Path) -> None:
    made = {"server": SERVER, "cpu_model": CPU, "finished": "2026-11-29T17:02:11Z"}
    page = alfworld_heldout(folder(tmp_path, [False, True, False], made))
    assert "muse-llm serve --model qwen1.5b --engine llama.cpp --threads 2 --port 8093 &" in page
    assert "Machine: Intel Xeon (family 6 model 167; amx, avx512, avx2) (3 episodes); episodes played 2026-11-29" \
        in page
    assert "carry no date" not in page
    page = alfworld_heldout(folder(tmp_path / "b", [False], {**made, "server": {**SERVER, "n_ctx": 4096}}))
    assert "--engine llama.cpp --threads 2 --n-ctx 4096 --port 8093 &" in page  # only a context that is not the default
    actor = {"engine": "transformers", "model": "hf:/tmp/actor", "threads": 1}
    page = alfworld_heldout(folder(tmp_path / "c", [False], {**made, "server": actor}))
    assert "muse-llm serve --model hf:/tmp/actor --engine transformers --threads 1 --alias qwen1.5b --port 8093 &" \
        in page


def test_one_outcome_class_is_called_degenerate_and_a_partial_run_says_how_far_it_is(tmp_path: Path) -> None:
    page = alfworld_heldout(folder(tmp_path, [False, False]))
    assert "won 0 of 2 episodes (95% interval 0% to 66%); 2 of the 3 episodes are played so far" in page
    assert "degenerate result" in page


def test_no_kept_runs_is_a_page_that_says_so(tmp_path: Path) -> None:
    assert "No runs kept yet." in alfworld_heldout(tmp_path)


def test_an_algorithm_3_collection_shows_its_wins_by_trial_and_its_pipeline_command(tmp_path: Path) -> None:
    """A kept `alfworld-pipeline --stage collect` folder: what Reflexion won (a game won only in its second
    trial is a DPO pair), with the pipeline command its run.json recorded, under its own heading."""
    from benchmarks.pages import ALG3_RUNS

    collect = tmp_path / ALG3_RUNS / "qwen1.5b" / "collect"
    collect.mkdir(parents=True)
    argv = ["alfworld-pipeline", "--stage", "collect", "--out", "docs/llm/alg3/qwen1.5b", "--model",
            "openai:http://127.0.0.1:8093/v1:qwen1.5b", "--train-games", "2", "--collect-episodes", "2"]
    (collect / "run.json").write_text(json.dumps({
        "env": "alfworld", "agent": "reflexion", "model": argv[6], "seed": 0, "episodes": 2, "max_steps": 50,
        "tasks": GAMES[1:], "argv": argv}))
    eps = [(GAMES[1], 0, False), (GAMES[1], 1, True), (GAMES[2], 0, False)]
    (collect / "episodes.jsonl").write_text("".join(json.dumps(
        {"task": t, "episode": e, "success": won, "steps": 9 if won else 50, "time_s": 30.0, "server": SERVER,
         "cpu_model": CPU, "finished": "2026-11-29T18:40:00Z"}) + "\n" for t, e, won in eps))
    page = alfworld_heldout(tmp_path)
    assert "No runs kept yet." in page and "## Algorithm 3's collection on the train games" in page
    assert "### Collection: reflexion, qwen1.5b through a local server (qwen1.5b)" in page
    assert "won 1 of 3 episodes (95% interval 6% to 79%); 3 of the 4 episodes are played so far" in page
    assert "Games with a win: 1 of 2; wins by trial (trial 1: 0 of 2, trial 2: 1 of 1)." in page
    assert ("muse-llm serve --model qwen1.5b --engine llama.cpp --threads 2 --port 8093 &\n"
            "muse-llm alfworld-pipeline --stage collect --out docs/llm/alg3/qwen1.5b") in page
    assert "Data: `docs/llm/alg3/qwen1.5b/collect/episodes.jsonl`" in page
    assert "What Algorithm 3 trained on it" not in page  # no later stage has run

    pipe = collect.parent
    for sub, name, data in (
            ("msa", "train_metrics.json", {"examples": 40, "positive": 8.0, "train": {"auroc": 0.99}, "unseen_games": {
                "folds": 2, "games_won": 1, "chunks": 40, "msa": {"auroc": 0.61, "auroc_ci95": [0.2, 0.9]},
                "control": {"auroc": 0.8, "auroc_ci95": [0.7, 0.9], "what": "the loop share"}}}),
            ("actor_sft", "metrics.json", {"lora_rank": 8, "dtype": "bfloat16", "steps": 4, "lr": 0.001,
                                           "rows_trained": 6, "max_length": 2000, "train_s": 400.0,
                                           "losses": [0.5, 0.2], "heldout_from": "games", "effect": {
                                               "heldout_rows": 4, "nll_base": 0.9, "nll_trained": 0.4,
                                               "greedy_changed": 1, "greedy_match_base": 2,
                                               "greedy_match_trained": 3, "differs": True}, "rows_expert": 0}),
            ("reflection_dpo", "metrics.json", {"skipped": "no DPO pair", "pairs": 0})):
        (pipe / sub).mkdir()
        (pipe / sub / name).write_text(json.dumps(data))
    page = alfworld_heldout(tmp_path)
    assert ("**0.61 (95% interval 0.20 to 0.90)**, against 0.80 (95% interval 0.70 to 0.90) for the no-training "
            "control (the loop share). Its interval includes chance (0.5). The control scores above M_sa") in page
    assert ("completion NLL 0.900 nats/token for the base, 0.400 trained; 1 of 4 greedy actions changed; the "
            "recorded action matched 2 times by the base, 3 trained.") in page
    assert "On 4 held-out rows (of games it was not trained on)" in page
    assert "the trained actor differs from its base. Every row is the agent's own action" in page
    assert "base weights in bfloat16, 4 steps" in page and "(`--stage dpo`): skipped: no DPO pair." in page
    (pipe / "msa" / "train_metrics.json").write_text('["not", "an object"]')
    (pipe / "actor_sft" / "metrics.json").write_text("{broken")
    page = alfworld_heldout(tmp_path)  # a malformed metrics file is left out, not a traceback
    assert "**M_sa**" not in page and "**SFT" not in page and "skipped: no DPO pair" in page


def _msa_record(seed: int, msa: float, without_task: float, loo_base: float) -> dict:
    def scored(auroc: float, diff: tuple[float, float, float] | None) -> dict:
        out = {"auroc": auroc, "auroc_ci95": [auroc - 0.2, min(auroc + 0.1, 1.0)]}
        if diff:
            out["minus_control"] = {"auroc": diff[0], "ci95": [diff[1], diff[2]]}
        return out

    novel = {"train_games": 10, "train_chunks": 228, "train_positive": 20, "games": 20, "games_won": 5,
             "chunks": 214, "msa": scored(msa, (msa - 0.77, msa - 0.99, msa - 0.74)),
             "msa_without_task": {**scored(without_task, (without_task - 0.77, -0.16, 0.2)),
                                  "minus_msa": {"auroc": without_task - msa, "ci95": [0.05, 0.5]}},
             "msa_without_input": scored(0.5, (-0.27, -0.34, -0.19)), "control": scored(0.77, None)}
    loo = {"games": 10, "games_won": 3, "msa": scored(0.6, (-0.2, -0.6, 0.1)), "msa_without_task": scored(0.5, None),
           "msa_without_input": scored(loo_base, (-0.7, -0.8, -0.6)), "control": scored(0.83, None)}
    return {"benchmark": "msa_novel", "collect": "docs/llm/alg3/qwen1.5b/collect",
            "heldout": "docs/llm/alfworld_heldout/react-qwen1.5b", "heldout_run": {"agent": "react",
            "model": "openai:http://127.0.0.1:8093/v1:qwen1.5b"}, "epochs": 30, "seed": seed,
            "novel_games": novel, "train_games_left_out": loo, "seconds": 60.0, "commit": "abc1234",
            "date": "2026-12-07", "cpu_model": CPU}


def test_msa_on_novel_games_reads_each_scoring_against_the_control_and_names_the_fold_bias(tmp_path: Path) -> None:
    """The M_sa section: one row per scoring and setting, a sentence per M_sa against the control from its paired
    interval, the seeds' spread, the fold bias only when the no-input M_sa shows it; a record without its two
    parts is left out."""
    from benchmarks.pages import MSA_NOVEL_RECORDS

    docs = folder(tmp_path, [False, True, False])
    path = docs / MSA_NOVEL_RECORDS
    lines = [_msa_record(0, 0.54, 0.82, 0.06), {"benchmark": "msa_novel", "novel_games": 3},
             _msa_record(1, 0.52, 0.80, 0.03)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    page = alfworld_heldout(docs)
    section = page[page.index("## M_sa on novel games"):]
    assert "M_sa scores below the control (difference -0.25 (-0.47 to -0.22))." in section
    assert "that ablation" in section and "includes zero" in section
    assert "Over the 2 seeds of M_sa's training recorded for this pair of folders, M_sa scores 0.52 to 0.54 " \
           "with the paper's input and 0.80 to 0.82 without the task." in section
    assert "biased below 0.5" in section
    assert "dropping the task input changes the AUROC by 0.28 (0.05 to 0.50)." in section
    assert section.count("| 20 held-out games (react qwen1.5b through a local server) |") == 8
    assert section.count("| 10 train games, one left out at a time |") == 8
    other = {**_msa_record(0, 0.47, 0.75, 0.06), "heldout": "docs/llm/alfworld_heldout/reflexion-qwen1.5b",
             "heldout_run": {"agent": "reflexion", "model": "openai:http://127.0.0.1:8093/v1:qwen1.5b"}}
    path.write_text("".join(json.dumps(x) + "\n" for x in [*lines, other]))
    section = alfworld_heldout(docs).split("## M_sa on novel games")[1]
    # a paragraph per held-out run; the collection's leave-one-game-out rows once per seed, not once per record
    assert "Held-out episodes of react (qwen1.5b through a local server): trained on 10 train games" in section
    assert "Held-out episodes of reflexion (qwen1.5b through a local server)" in section
    assert "reaches AUROC 0.47" in section
    assert "recorded for this pair of folders, M_sa scores 0.52 to 0.54" in section
    assert section.count("(reflexion qwen1.5b through a local server) |") == 4
    assert section.count("| 10 train games, one left out at a time |") == 8
    path.write_text(json.dumps(_msa_record(0, 0.54, 0.82, 0.5)) + "\n")
    assert "biased below 0.5" not in alfworld_heldout(docs) and "Over the" not in alfworld_heldout(docs)
    path.write_text("")
    assert "## M_sa on novel games" not in alfworld_heldout(docs)


def test_two_runs_of_one_model_are_paired_by_the_games_both_played_in_full(tmp_path: Path) -> None:
    """ReAct (1 episode a game) against Reflexion (2 trials): a game counts once, in the first episode and in any
    episode; a game Reflexion has not finished both trials of is left out; exact McNemar on the discordant games."""
    docs = folder(tmp_path, [True, False, False])
    run = docs / LLM_RUNS / "reflexion-qwen1.5b"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({
        "env": "alfworld", "agent": "reflexion", "model": "openai:http://127.0.0.1:8093/v1:qwen1.5b", "seed": 0,
        "episodes": 2, "max_steps": 50, "tasks": GAMES}))
    played = [(GAMES[0], 0, False), (GAMES[0], 1, False), (GAMES[1], 0, False), (GAMES[1], 1, True),
              (GAMES[2], 0, True)]  # the third game's second trial is not played yet
    (run / "episodes.jsonl").write_text("".join(
        json.dumps({"task": t, "episode": e, "success": w, "steps": 10, "time_s": 20.0}) + "\n"
        for t, e, w in played))
    page = alfworld_heldout(docs)
    section = page[page.index("## Agents paired by game"):page.index("## Agents paired by game") + 2000]
    assert "in their first episodes, react won 1 and reflexion 0 of 2 games" in section
    assert "in any of their episodes, react won 1 and reflexion 1 of 2 games (exact McNemar p = 1.00" in section
    assert "| react / reflexion | first episode of each | 2 | 1 | 0 | 1 | 0 | 1.00 |" in section
    assert "| react / reflexion | any episode of each | 2 | 1 | 1 | 1 | 1 | 1.00 |" in section
    assert "reflexion has 2 episodes a game against react's 1, so 'any episode' gives it more tries" in section


def test_a_muse_run_names_its_options_and_how_its_m_sa_is_rebuilt(tmp_path: Path) -> None:
    """The command of a kept MUSE run resumes it: its `--agent-opt`s (shell-quoted, read from run.json) and, as
    model weights are not kept, the lines that retrain its M_sa on the kept collection it names."""
    from benchmarks.pages import ALG3_RUNS

    folder(tmp_path, [False])
    run_file = tmp_path / LLM_RUNS / "react-qwen1.5b" / "run.json"
    opts = {"msa": "runs/alg3-qwen1.5b/msa", "rollout_tokens": 64, "note": "a b;c"}
    run_file.write_text(json.dumps({**json.loads(run_file.read_text()), "agent": "muse", "agent_opt": opts}))
    page = alfworld_heldout(tmp_path)
    assert "--agent-opt 'msa=runs/alg3-qwen1.5b/msa'" not in page  # quoted only where a shell needs it
    assert ("--model openai:http://127.0.0.1:8093/v1:qwen1.5b --agent-opt msa=runs/alg3-qwen1.5b/msa --agent-opt "
            "'note=a b;c' --agent-opt rollout_tokens=64 --out docs/llm/alfworld_heldout/") in page
    assert "1 episode carries no date" in page
    assert "--stage train-sa" not in page  # no kept collection of that name: nothing to rebuild from
    collect = tmp_path / ALG3_RUNS / "qwen1.5b" / "collect"
    collect.mkdir(parents=True)
    argv = ["alfworld-pipeline", "--stage", "collect", "--out", "docs/llm/alg3/qwen1.5b", "--model", "m",
            "--train-games", "10", "--collect-episodes", "2"]
    (collect / "run.json").write_text(json.dumps({"env": "alfworld", "agent": "reflexion", "model": "m", "seed": 0,
                                                  "episodes": 2, "max_steps": 50, "tasks": GAMES, "argv": argv}))
    page = alfworld_heldout(tmp_path)
    assert ("mkdir -p runs/alg3-qwen1.5b && cp -r docs/llm/alg3/qwen1.5b/collect runs/alg3-qwen1.5b/  # M_sa, "
            "trained on the kept collection:\nmuse-llm alfworld-pipeline --stage train-sa --out runs/alg3-qwen1.5b "
            "--model qwen1.5b --train-games 10 --collect-episodes 2\nGAMES=") in page


def test_a_muse_run_says_what_its_self_regulation_chose_among(tmp_path: Path) -> None:
    """From the steps' recorded rollouts: where the first actions disagree (only there can M_sa change the
    action), whether it took the most common one, its score spread, and the competence of won and lost episodes;
    malformed step records are skipped, and a run without them (ReAct) gets no such paragraph."""
    assert "What the self-regulation chose among" not in alfworld_heldout(folder(tmp_path / "a", [False]))
    base = folder(tmp_path / "b", [True, False])
    steps_won = [{"rollout_actions": ["go to a", "go to a", "go to b"], "rollout_scores": [0.2, 0.3, 0.9]},
                 {"rollout_actions": ["take x", "take x"], "rollout_scores": [0.5, 0.7]}]
    steps_lost = [{"rollout_actions": ["go to a", "go to b", "go to b"], "rollout_scores": [0.1, 0.4, 0.2]},
                  {"rollout_actions": ["look"], "rollout_scores": [0.3]},
                  {"rollout_actions": ["x"], "rollout_scores": ["0.9"]}, "junk", {"rollouts": 5}]
    eps = base / LLM_RUNS / "react-qwen1.5b" / "episodes.jsonl"
    rows = [json.loads(line) for line in eps.read_text().splitlines()]
    rows[0]["step_info"], rows[1]["step_info"] = steps_won, steps_lost
    eps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = alfworld_heldout(base)
    assert ("**What the self-regulation chose among** (4 steps that recorded their rollouts' first actions): the "
            "valid rollouts disagreed on the first action in 2 (50%), the only steps where M_sa's choice can change "
            "the action; there M_sa took the most common first action in 1 of 2 (50%; a vote of the rollouts takes "
            "it every time). The median spread of M_sa's scores over a step's rollouts is 0.3. Mean competence "
            "of the chosen rollout: 0.8 over 2 steps of won episodes, 0.35 over 2 steps of lost episodes.") in page


def test_a_vote_control_run_is_named_as_such_and_its_recorded_choice_is_read(tmp_path: Path) -> None:
    """A MUSE run with `select=vote` (the control) is labelled so in its section, the pairs and the README; its
    paragraph reads the followed rollout from the step's `chosen`, not the highest score; an out-of-range or
    non-integer `chosen` falls back to the highest score."""
    from benchmarks.pages import readme_llm_heldout

    base = folder(tmp_path, [True, False])
    vote = base / LLM_RUNS / "muse-vote-qwen1.5b"
    vote.mkdir()
    run = json.loads((base / LLM_RUNS / "react-qwen1.5b" / "run.json").read_text())
    (vote / "run.json").write_text(json.dumps({**run, "agent": "muse", "agent_opt": {"select": "vote"}}))
    steps = [{"rollout_actions": ["go to a", "go to a", "go to b"], "rollout_scores": [0.2, 0.3, 0.9], "chosen": 0},
             {"rollout_actions": ["go to a", "go to a", "go to b"], "rollout_scores": [0.2, 0.3, 0.6], "chosen": 7},
             {"rollout_actions": ["go to a", "go to a", "go to b"], "rollout_scores": [0.2, 0.3, 0.6],
              "chosen": True}]
    (vote / "episodes.jsonl").write_text("".join(
        json.dumps({"task": t, "episode": 0, "success": False, "steps": 3, "step_info": steps}) + "\n"
        for t in GAMES[:2]))
    page = alfworld_heldout(base)
    assert "## muse (select=vote), qwen1.5b through a local server" in page
    assert "muse (select=vote) with qwen1.5b through a local server won 0 of 2 episodes" in page
    assert ("the only steps where the `select=vote` rule's choice can change the action; there the `select=vote` "
            "rule took the most common first action in 2 of 6 (33%") in page
    assert "Mean competence of the chosen rollout: 0.47 over 6 steps of lost episodes" in page  # (0.2+0.6+0.6)/3
    assert "| muse (select=vote) / react | first episode of each | 2 | 0 | 1 | 0 | 1 | 1.00 |" in page  # folder order
    assert "MUSE-LLM (select=vote) (qwen1.5b through a local server) won 0 of 2 episodes" in readme_llm_heldout(base)


def test_the_readme_line_counts_each_run_and_pairs_them_by_game(tmp_path: Path) -> None:
    """The README's held-out line comes from the kept runs: wins with an interval and games, a partial run said as
    such, a run with no episode yet, and each pair of one model's runs on the games both played in full."""
    from benchmarks.pages import readme_llm_heldout

    assert readme_llm_heldout(tmp_path) == "No held-out ALFWorld run is kept yet."
    folder(tmp_path, [False, True, True])
    muse = tmp_path / LLM_RUNS / "muse-qwen1.5b"
    muse.mkdir()
    run = json.loads((tmp_path / LLM_RUNS / "react-qwen1.5b" / "run.json").read_text())
    (muse / "run.json").write_text(json.dumps({**run, "agent": "muse"}))
    line = readme_llm_heldout(tmp_path)
    assert "MUSE-LLM (qwen1.5b through a local server): none of its 3 episodes played yet" in line
    assert "ReAct (qwen1.5b through a local server) won 2 of 3 episodes (21% to 94%) on 2 of 3 games;" in line
    assert "Wins in the first episode" not in line  # no game played by both
    (muse / "episodes.jsonl").write_text("".join(json.dumps({"task": t, "episode": 0, "success": t == GAMES[0]})
                                                 + "\n" for t in GAMES[:2]))
    line = readme_llm_heldout(tmp_path)
    assert line.index("ReAct") < line.index("MUSE-LLM")  # agents in a fixed order, not the folders'
    assert "MUSE-LLM (qwen1.5b through a local server) won 1 of 2 episodes (9% to 91%) on 1 of 2 games, 2 of its " \
           "3 episodes played so far" in line
    assert ("Wins in the first episode, by game, on the games both runs played in full: ReAct 1 vs MUSE-LLM 1 of 2 "
            "games (McNemar p = 1.00).") in line
