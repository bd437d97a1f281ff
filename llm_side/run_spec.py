"""One run of an LLM agent on a text env as one frozen value, `RunSpec`, and the one way to build and run it.

Every `muse-llm` command that runs agents (`run`, `sweep-tau`, `compare`, `alfworld-pipeline`) builds its
runs with `build_spec` (a settings file's mapping and the command-line flags over the command's own
defaults) and runs them with `execute`. So every command refuses the same bad input with the same line
(an unknown env, agent or task; a misspelled `--env-opt` / `--agent-opt` key, with the closest valid
one; a bad integer; an agent on an env it does not run on), and every run folder gets a `run.json`
(`RunSpec.settings`: the spec with its task selection resolved to task ids) that a resume must match.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llm_side import registry
from muse_common.files import RunFileError, read_json_object
from muse_common.overrides import OverrideError, parse_key_values
from muse_common.run_lock import RunFolderBusy, run_folder_lock
from muse_common.settings import SettingsError, build_options

RUN_KEYS = ("env", "agent", "split", "tasks", "limit", "episodes", "max_steps", "model", "seed", "env_opt",
            "agent_opt")
"""The keys of a run settings file (`muse-llm run --config`), named as the flags are."""
INT_SETTINGS = {"limit": 1, "episodes": 1, "max_steps": 1, "seed": 0}  # name -> smallest allowed
INT_LIMITS: dict[str, tuple[int, str]] = {
    "limit": (1_000_000, "tasks; the largest env has some thousands"),
    "episodes": (10_000, "episodes per task; the papers use up to 10"),
    "max_steps": (100_000, "steps per episode; the envs end theirs within some hundreds"),
    "seed": (2**31 - 1, "a 32-bit seed, what torch and numpy take"),
}
"""name -> (largest allowed, why): a typo such as --episodes 99999999999999999999 is one line, not a run."""
RUN_FILE = "run.json"
RUN_JSON_KEYS = ("env", "agent", "model", "seed", "episodes", "max_steps", "tasks", "env_opt", "agent_opt")
"""The settings a run.json holds (besides `argv`, the command line that wrote it); `RunSpec.settings`."""


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


def default_model() -> str:
    """`MUSE_LLM_MODEL` when set, else the backends' default; read when a spec is built, not at import."""
    from llm_side.backends import default_model as backends_default

    return backends_default()


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What one run is: the env and its options, the agent and its options, the model, the task
    selection, the episodes per task, the step limit and the seed. `env_opt` / `agent_opt` are the
    options as given (what run.json stores); `env_options` / `agent_options` the checked `Options`
    built from them (the mapping itself for a registered third-party plugin)."""

    env: str
    agent: str
    model: str
    env_opt: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    agent_opt: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    split: str | None = None
    tasks: tuple[str, ...] | None = None
    limit: int | None = None
    episodes: int = 1
    max_steps: int | None = None
    seed: int = 0
    env_options: Any = None
    agent_options: Any = None

    def __post_init__(self) -> None:  # the options as given are read-only too
        object.__setattr__(self, "env_opt", types.MappingProxyType(dict(self.env_opt)))
        object.__setattr__(self, "agent_opt", types.MappingProxyType(dict(self.agent_opt)))

    def settings(self, task_ids: Sequence[str]) -> dict[str, Any]:
        """The run.json of this spec once its tasks are chosen (a resume is refused when any differs)."""
        return {"env": self.env, "agent": self.agent, "model": self.model, "seed": self.seed,
                "episodes": self.episodes, "max_steps": self.max_steps, "tasks": list(task_ids),
                "env_opt": dict(self.env_opt), "agent_opt": dict(self.agent_opt)}

    def with_agent_opt(self, **options: Any) -> RunSpec:
        """This spec with more agent options (checked like the others)."""
        agent_opt = {**self.agent_opt, **options}
        return dataclasses.replace(self, agent_opt=agent_opt,
                                   agent_options=check_options("agent", self.agent, agent_opt))


# -- checks -------------------------------------------------------------------------------------------------
def parse_options(pairs: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """`--env-opt` / `--agent-opt` `k=v` strings -> dict of YAML scalars (true, 3, 0.5, else the text)."""
    try:
        return parse_key_values(pairs, flag, structured=False)
    except OverrideError as e:
        raise UsageError(str(e)) from None


def _not_importable(kind: str, name: str, exc: ImportError) -> UsageError:
    return UsageError(f"{kind} '{name}' is registered but cannot be imported ({exc}); "
                      f"install its extra, e.g. pip install -e .[{name}]")


def resolve(kind: str, name: str) -> Callable[..., Any]:
    """Registry name (built in, or a plugin registered under the entry-point group `muse_llm.envs` /
    `muse_llm.agents`) -> factory. Nothing else is imported: a `module:factory` path is refused in one line."""
    try:
        return registry.env_factory(name) if kind == "env" else registry.agent_factory(name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except ImportError as exc:
        raise _not_importable(kind, name, exc) from None


def check_options(kind: str, name: str, options: Any) -> Any:
    """A registered env's or agent's `Options` built from `--env-opt`/`--agent-opt` values (and the settings
    file's `env_opt`/`agent_opt`), or a UsageError naming the option and what it allows; a registered
    third-party plugin gets the mapping as given."""
    table = registry.ENV_OPTIONS if kind == "env" else registry.AGENT_OPTIONS
    if name not in table:
        return options
    try:
        cls = registry.env_options(name) if kind == "env" else registry.agent_options(name)
        return build_options(cls, options, name)
    except ImportError as exc:
        raise _not_importable(kind, name, exc) from None
    except SettingsError as exc:
        raise UsageError(f"--{kind}-opt: {exc}") from None


def check_pair(env_name: str, agent_name: str) -> None:
    """Refuse a registered agent on a registered env it does not run on (the env/agent table of docs/llm/index.md)."""
    if env_name in registry.ENVS and agent_name in registry.AGENTS:
        envs = registry.agent_envs(agent_name)
        if env_name not in envs:
            fits = sorted(a for a in registry.AGENTS if env_name in registry.agent_envs(a))
            raise UsageError(f"agent '{agent_name}' runs on env {' / '.join(envs)}, not '{env_name}'; "
                             f"agents for {env_name}: {', '.join(fits)}")


def check_int(key: str, value: Any) -> int | None:
    """An integer run setting, or a message naming the setting and what it allows."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"'{key}' must be an integer >= {INT_SETTINGS[key]}, got {value!r}")
    if value < INT_SETTINGS[key]:
        raise UsageError(f"'{key}' must be >= {INT_SETTINGS[key]}, got {value}")
    high, why = INT_LIMITS[key]
    if value > high:
        raise UsageError(f"'{key}' must be at most {high} ({why}), got {value}")
    return value


def _task_list(tasks: Any) -> tuple[str, ...] | None:
    """`--tasks a,b` or a settings file's `tasks: [a, b]` -> ('a', 'b')."""
    if tasks is None:
        return None
    items = tasks if isinstance(tasks, list | tuple) else str(tasks).split(",")
    return tuple(str(t).strip() for t in items if str(t).strip())


def _options(value: Any, flag: str) -> dict[str, Any]:
    """Options from the command line (`k=v` strings) or from a settings file (a mapping)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    return parse_options(value, flag)


# -- the one spec builder -----------------------------------------------------------------------------------
def build_spec(settings: Mapping[str, Any] | None = None, flags: Mapping[str, Any] | None = None,
               defaults: Mapping[str, Any] | None = None) -> RunSpec:
    """The checked `RunSpec` of a settings file's mapping (`RUN_KEYS`) and the command-line `flags` (same
    names; None = not given), over the command's `defaults`: a flag wins over the file, the file over the
    defaults (a split given drops the defaults' task list); options merge key by key in that order. The
    model defaults to `MUSE_LLM_MODEL`, else the backends' default, read now. Nothing starts: no env, no
    model."""
    settings, flags, defaults = dict(settings or {}), dict(flags or {}), dict(defaults or {})
    if any(source.get("split") is not None for source in (flags, settings)):
        defaults.pop("tasks", None)  # a split given picks the tasks, not the command's default task list

    def get(key: str) -> Any:
        for source in (flags, settings, defaults):
            if source.get(key) is not None:
                return source[key]
        return None

    for key in INT_SETTINGS:
        check_int(key, get(key))
    env_name, agent_name = get("env"), get("agent")
    if not env_name or not agent_name:
        raise UsageError("run needs --env and --agent (or a --config that sets them)")
    if flags.get("split") and flags.get("tasks"):
        raise UsageError("give --split or --tasks, not both")
    env_name, agent_name = str(env_name), str(agent_name)
    check_pair(env_name, agent_name)
    resolve("env", env_name)  # an unknown or uninstalled env or agent is named before anything starts
    resolve("agent", agent_name)
    env_opt, agent_opt = {}, {}
    for source in (defaults, settings, flags):
        env_opt.update(_options(source.get("env_opt"), "--env-opt"))
        agent_opt.update(_options(source.get("agent_opt"), "--agent-opt"))
    agent_options = check_options("agent", agent_name, agent_opt)
    env_options = check_options("env", env_name, env_opt)
    return RunSpec(env=env_name, agent=agent_name, model=str(get("model") or default_model()), env_opt=env_opt,
                   agent_opt=agent_opt, split=get("split"), tasks=_task_list(get("tasks")), limit=get("limit"),
                   episodes=get("episodes") or 1, max_steps=get("max_steps"), seed=get("seed") or 0,
                   env_options=env_options, agent_options=agent_options)


# -- starting the parts -------------------------------------------------------------------------------------
def make_env(name: str, options: Mapping[str, Any]) -> Any:
    """The env `name` with its options checked (a plugin factory gets them as keywords)."""
    opts = check_options("env", name, dict(options))
    factory = resolve("env", name)
    try:
        return factory(opts) if name in registry.ENV_OPTIONS else factory(**options)
    except TypeError as exc:
        raise UsageError(f"env '{name}' rejected --env-opt {dict(options)}: {exc}") from None


def make_agent(spec: RunSpec, llm: Any = None) -> Any:
    """The spec's agent on `llm` (default: the spec's model, loaded on first use)."""
    from llm_side.backends import LazyLLM

    factory = resolve("agent", spec.agent)
    try:
        return factory(spec.env, llm if llm is not None else LazyLLM(spec.model), spec.agent_options)
    except ValueError as exc:
        if "--agent-opt" in str(exc) or not spec.agent_opt:
            raise UsageError(str(exc)) from None
        given = " ".join(f"{k}={v}" for k, v in spec.agent_opt.items())  # name the input when the agent did not
        raise UsageError(f"agent '{spec.agent}' rejected --agent-opt {given}: {exc}") from None


def select_tasks(env: Any, split: str | None, tasks: str | Sequence[str] | None, limit: int | None) -> list[str]:
    """The task ids a run plays: `tasks` (checked against the env, through its aliases where it has
    them), else the split's, the first `limit` of them."""
    expand = getattr(env, "expand_task_ids", None)  # envs with aliases (ScienceWorld's paper ids "4-1")
    wanted = list(_task_list(tasks) or ())
    if wanted and callable(expand):
        try:
            ids = list(expand(wanted))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif wanted:
        ids = wanted
        known = set(env.task_ids(split))
        unknown = [t for t in ids if t not in known]
        if unknown:
            raise UsageError(
                f"unknown task id(s) {unknown} for env '{env.name}'; list them with "
                f"`muse-llm tasks --env {env.name}" + (f" --split {split}`" if split else "`")
            )
    else:
        ids = list(env.task_ids(split))
    twice = sorted({t for t in ids if ids.count(t) > 1})
    if twice:
        raise UsageError(f"--tasks names {', '.join(repr(t) for t in twice)} more than once; give each task once "
                         "(use --episodes for more episodes of a task)")
    if limit is not None:
        ids = ids[:limit]
    return ids


# -- run.json -----------------------------------------------------------------------------------------------
def read_run_file(path: Path, fix: str) -> dict[str, Any]:
    """A folder's run.json as a mapping naming run settings, or one UsageError line ending in `fix`."""
    try:
        info = read_json_object(path, "a run settings file", fix)
    except RunFileError as e:
        raise UsageError(str(e)) from None
    if not any(k in info for k in RUN_JSON_KEYS):
        raise UsageError(f"{path} names none of the run settings; {fix}")
    return info


def model_identity(spec: Any) -> Any:
    """What of a model spec a resume must keep: the model. The endpoint of a served model (`openai:URL:MODEL`)
    may change between a run and its resume (the server moved, or the stop line said to fix the URL), so
    `openai:http://a/v1:qwen` and `openai:http://b/v1:qwen` are the same model; any other spec is compared whole."""
    if isinstance(spec, str) and spec.startswith("openai:"):
        url, sep, model = spec.removeprefix("openai:").rpartition(":")
        if sep and url:
            return ("openai", model)
    return spec


RESUME_MAY_CHANGE = ("the server URL of an openai:URL:MODEL model (not the model)", "the command line (argv)",
                     "MUSE_LLM_HTTP_* client settings")
"""What a resume may change (docs/reliability.md); every other key of run.json must match."""


def check_resume(run_file: Path, settings: dict[str, Any]) -> None:
    """A run folder is resumed only with the settings its run.json names (as `muse-wm` does): a resume
    with another model, seed, step limit, task list or option would mix two runs under one run.json. The
    endpoint of a served model may change (`model_identity`); a new one is said in one line and kept in
    run.json's `endpoints`, so the records stay traceable."""
    old = read_run_file(run_file, "delete it to resume with the settings given, or pass a different --out folder")
    now = json.loads(json.dumps(settings))  # as run.json stores them (tuples as lists)
    same = {"model": model_identity}
    differ = [k for k in now if same.get(k, lambda v: v)(old.get(k)) != same.get(k, lambda v: v)(now[k])]
    if not differ and old.get("model") != now.get("model"):
        from muse_common.files import atomic_write_json

        print(f"muse-llm: resuming {run_file.parent} with the model at a new endpoint ({old.get('model')} there, "
              f"{now.get('model')} now); the model is the same, so the run goes on", file=sys.stderr)
        prev = old.get("endpoints")
        prev = prev if isinstance(prev, list) else [old.get("model")]
        endpoints = [*prev, now["model"]][-100:]  # the last hundred: a file someone sent cannot grow it for ever
        atomic_write_json(run_file, {**old, "model": now["model"], "endpoints": endpoints})
    if differ:
        pairs = "; ".join(f"{k}: {old.get(k)!r} there, {now[k]!r} now" for k in differ)
        raise UsageError(f"--out {run_file.parent} holds a run with other settings ({pairs}); rerun with the settings "
                         "of its run.json to resume, or pass a different --out folder")


# -- running ------------------------------------------------------------------------------------------------
def execute(spec: RunSpec, out: str | Path, *, progress: bool = True, env: Any = None, llm: Any = None,
            agent: Any = None) -> dict[str, Any]:
    """Run `spec` into the folder `out` through the shared runner (resuming what it holds) and return
    the summary. `env`, `llm` or `agent` may be given ready-made (one env across a sweep's runs; a test's
    scripted model); an env given is left open. The model is checked to be installed before anything starts."""
    from llm_side.backends import check_available
    from llm_side.backends.served import served_by
    from llm_side.harness.runner import run_eval
    from muse_common.files import atomic_write_json, output_dir_problem

    problem = output_dir_problem(out)
    if problem:
        raise UsageError(f"--out {problem}")
    random.seed(spec.seed)
    server = None  # the local `muse-llm serve` the model goes through, recorded in every episode line
    if llm is None and agent is None:
        check_available(spec.model)
        server = served_by(spec.model)
    own_env = env is None
    env = make_env(spec.env, spec.env_opt) if own_env else env
    try:
        task_ids = select_tasks(env, spec.split, spec.tasks, spec.limit)
        agent = agent if agent is not None else make_agent(spec, llm)
        out = Path(out)
        with run_folder_lock(out, "--out"):  # one writer per run folder, held for the run's life
            run_file = out / RUN_FILE
            if run_file.exists():
                check_resume(run_file, spec.settings(task_ids))
            else:
                atomic_write_json(run_file, {**spec.settings(task_ids), "argv": sys.argv[1:]})
            return run_eval(env, agent, env_name=spec.env, agent_name=spec.agent, task_ids=task_ids,
                            episodes=spec.episodes, max_steps=spec.max_steps, out_dir=out, seed=spec.seed,
                            progress=progress, provenance={"server": server} if server else None)
    finally:
        if own_env:
            env.close()


def outcome_line(spec: RunSpec, summary: Mapping[str, Any], out: str | Path) -> str:
    """The line a finished run prints: successes of episodes, and where the records are."""
    return (f"{spec.env}/{spec.agent}: {summary['successes']}/{summary['episodes']} episodes succeeded "
            f"({summary['success_rate']:.1%}); records in {out}")


def run_command(command: str, body: Callable[[], int]) -> int:
    """`body()`'s exit status, with bad input and run failures as one stderr line `muse-llm COMMAND:
    error: ...` (exit 2; MUSE_LLM_DEBUG=1 shows the traceback instead), Ctrl-C as a line saying how to
    resume (exit 130), and a closed pipe (`| head`) as a quiet exit."""
    try:
        return int(body() or 0)
    except BrokenPipeError:  # `muse-llm tasks ... | head`: the reader left; exit quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"muse-llm {command}: stopped: interrupted; finished episodes are kept, rerun the same command "
              "to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the known kinds below are one line; anything else is a bug
        from llm_side.harness.runner import is_fatal

        fatal = is_fatal(exc)  # a backend that stopped the run: also http.client errors, which are no OSError
        if os.environ.get("MUSE_LLM_DEBUG") or not (
                fatal or isinstance(exc, UsageError | ValueError | OSError | RuntimeError | RunFolderBusy)):
            raise
        message: Any = exc
        if fatal:
            message = f"{type(exc).__name__}: {exc}" if not str(exc) or "http.client" in type(exc).__module__ else exc
            moved = "openai:URL:MODEL" in str(message)
            message = (f"{message} Nothing was recorded for the episode it stopped in; " + (
                "rerun to resume, with the server's URL fixed in --model if it was wrong (the URL may change on "
                "resume, the model may not)" if moved else "rerun the same command to resume"))
        elif isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and exc.errno:
            where = f" {exc.filename}" if exc.filename else ""
            message = f"cannot write{where}: {os.strerror(exc.errno)}; records written so far are kept"
        print(f"muse-llm {command}: error: {' '.join(str(message).split())}", file=sys.stderr)
        return 2
