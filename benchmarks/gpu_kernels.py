"""GPU kernels per train step, counted from the compiler without a GPU (deviceless AOT compile).

Why: on one H200 the jitted train step takes ~28 ms at both size1m and size12m (B16 x T64): it is bound by how
many small kernels run one after another (the observe scan over T, the imagination scan over the horizon,
forward and backward), not by FLOPs. Whether a change (scan unroll, bfloat16, command buffers) cuts that
number can be read off the compiler's output on a machine with no GPU: XLA compiles for a described CUDA
target (`jax.experimental.topologies.get_topology_desc(platform="cuda", target_config=...)`, a 1x1x1
topology), and this script counts, for the same train step benchmarks/wm_throughput.py times:

    from the optimized HLO (`compiled.as_text()`): the ops that become kernels (fusions, custom calls such as
        cuBLAS gemms, copies, anything else not free) in the entry computation and in each while-loop body,
        each while's trip count (`known_trip_count`), and kernels per step = entry + sum(body x trip count);
    from XLA's thunk sequence after its thunk passes (CUDA only; written by `xla_dump_to`): what the GPU
        runtime executes, with command buffers (CUDA graphs) as XLA formed them: `thunk_kernels_per_step`
        (every kernel, copy and gemm, loops multiplied out) and `thunk_launches_per_step` (host-side
        submissions: a command buffer counts once, whatever it holds).

A while loop with a known trip count runs its body that many times from the host, with no condition kernel
and no host sync (XLA's WhileThunk); one whose count is unknown evaluates its condition on the device and
waits for it each iteration (`unknown_trip_whiles` > 0 says so). These are compiler counts, not timings.

    python benchmarks/gpu_kernels.py --size size12m --set model.observe_unroll=8 --out docs/gpu_kernels.jsonl

`--platform cuda` needs jax's CUDA plugin (`pip install "jax[cuda12]"`, ptxas included) but no GPU;
`--platform cpu` compiles for the local CPU instead (HLO counts only), which the tests use. One JSON line is
printed per `--command-buffer` variant.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax

if __package__ in (None, ""):  # run as a script from a checkout: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import emit_record, git_commit  # noqa: E402
from benchmarks.wm_throughput import build_config, synthetic_batch  # noqa: E402
from muse_jax.agent import ObsSpec, create_learner, make_train_step  # noqa: E402
from muse_jax.config import MODEL_SIZES  # noqa: E402
from muse_jax.config.loops import with_loops_for  # noqa: E402

# An H100 SXM described to XLA (the fields of its GpuTargetConfig that matter for codegen and for XLA's
# command-buffer pass; values as in XLA's own xla/backends/gpu/target_config/specs/h100_sxm.txtpb).
H100_TARGET_CONFIG = """
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84942979072
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
  driver_version: "13.0.0"
  runtime_version: "12.8.0"
  compile_time_toolkit_version: "12.8.0"
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 10 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""

# XLA's default command-buffer kinds in this jax (0.10.2), and the variants --command-buffer names.
DEFAULT_COMMAND_BUFFER = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,DYNAMIC_SLICE_FUSION"
COMMAND_BUFFER_VARIANTS = {"default": None, "off": "", "while": DEFAULT_COMMAND_BUFFER + ",WHILE"}

# HLO ops that launch nothing on the GPU (bookkeeping, aliasing, control flow counted through its callees).
FREE_OPS = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional",
                      "call", "after-all", "add-dependency", "opt-barrier", "domain", "partition-id",
                      "replica-id"})
# Thunks that hold others rather than launching work themselves.
CONTAINER_THUNKS = frozenset({"kWhile", "kCommandBuffer", "kConditional", "kSequential"})

_COMP = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*.*?\s([a-z][a-z0-9\-]*)\((.*)$")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_THUNK = re.compile(r"^( *)(\d+): (k\w+)\s*\[[^\]]*\]\s*(\S*)")


# ------------------------------------------------------------------------------------------ optimized HLO


def parse_hlo(text: str) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    """(entry computation name, computation name -> its instructions as {name, op, rest})."""
    comps: dict[str, list[dict[str, Any]]] = {}
    entry, current = "", None
    for line in text.splitlines():
        m = _COMP.match(line)
        if m:
            current = m.group(2)
            comps[current] = []
            entry = current if m.group(1) else entry
            continue
        if current is None:
            continue
        if line.startswith("}"):
            current = None
            continue
        m = _INSTR.match(line)
        if m:
            comps[current].append({"name": m.group(1), "op": m.group(2), "rest": m.group(3)})
    if not entry:
        raise ValueError("no ENTRY computation in the HLO text")
    return entry, comps


def _attr(rest: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=%([\w.\-]+)", rest)
    return m.group(1) if m else None


def count_hlo(text: str) -> dict[str, Any]:
    """Kernel-launching ops of an optimized HLO module: in the entry, per while body, and per step.

    Walks what runs, from the entry: a while contributes its body x its known trip count (once, and counted
    in `unknown_trip_whiles`, when the count is unknown; its condition then runs each iteration too), a call
    its callee, a conditional its largest branch. Fused computations are never walked: a fusion is one kernel.
    """
    entry, comps = parse_hlo(text)
    whiles: list[dict[str, Any]] = []
    unknown = 0

    def walk(name: str, depth: int) -> tuple[int, collections.Counter]:
        nonlocal unknown
        total, kinds = 0, collections.Counter()
        for ins in comps.get(name, []):
            op = ins["op"]
            if op == "while":
                body, cond = _attr(ins["rest"], "body"), _attr(ins["rest"], "condition")
                trip_m = _TRIP.search(ins["rest"])
                trip = int(trip_m.group(1)) if trip_m else None
                n_body, k_body = walk(body, depth + 1)
                n_cond, k_cond = (0, collections.Counter()) if trip is not None else walk(cond, depth + 1)
                source = re.search(r'op_name="([^"]*)"', ins["rest"])
                whiles.append({"name": ins["name"], "depth": depth, "trip_count": trip,
                               "body_kernels": n_body, "body_kinds": dict(k_body),
                               "op_name": source.group(1) if source else None})
                if trip is None:
                    unknown += 1
                reps = trip if trip is not None else 1
                total += reps * (n_body + n_cond)
                for k, v in (k_body + k_cond).items():
                    kinds[k] += reps * v
            elif op == "call":
                n, k = walk(_attr(ins["rest"], "to_apply") or "", depth)
                total, kinds = total + n, kinds + k
            elif op == "conditional":
                branches = re.findall(r"%([\w.\-]+)", ins["rest"].split("branch_computations=", 1)[-1].split("}")[0]) \
                    if "branch_computations=" in ins["rest"] else \
                    [b for b in (_attr(ins["rest"], "true_computation"), _attr(ins["rest"], "false_computation")) if b]
                best = max((walk(b, depth) for b in branches), key=lambda r: r[0], default=(0, collections.Counter()))
                total, kinds = total + best[0], kinds + best[1]
            elif op not in FREE_OPS:
                kind = "fusion" if op == "fusion" else "custom-call" if op == "custom-call" else \
                    "copy" if op.startswith("copy") else "other"
                total += 1
                kinds[kind] += 1
        return total, kinds

    per_step, kinds = walk(entry, 0)
    entry_kernels = sum(1 for ins in comps[entry] if ins["op"] not in FREE_OPS)
    return {"hlo_entry_kernels": entry_kernels, "hlo_kernels_per_step": per_step, "hlo_kinds_per_step": dict(kinds),
            "hlo_whiles": sorted(whiles, key=lambda w: (w["depth"], -w["body_kernels"] * (w["trip_count"] or 1))),
            "hlo_trip_counts": sorted((w["trip_count"] or 0 for w in whiles), reverse=True),
            "unknown_trip_whiles": unknown,
            "hlo_command_buffer_calls": sum(1 for c in comps.values() for ins in c
                                            if ins["op"] == "call" and "command_buffer" in ins["rest"])}


# --------------------------------------------------------------------------------- thunk sequence (CUDA)


def parse_thunks(text: str) -> list[dict[str, Any]]:
    """XLA's printed thunk sequence as a tree: {id, kind, name, children} ({cond, body} for kWhile)."""
    root: dict[str, Any] = {"kind": "root", "children": [], "slot": "children"}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for line in text.splitlines():
        s = line.strip()
        if s in ("condition:", "body:"):
            while stack[-1][1]["kind"] != "kWhile":  # the while these sections belong to
                stack.pop()
            stack[-1][1]["slot"] = "cond" if s == "condition:" else "body"
            continue
        m = _THUNK.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        while stack[-1][0] >= indent:
            stack.pop()
        node = {"id": int(m.group(2)), "kind": m.group(3), "name": m.group(4), "children": [], "cond": [],
                "body": [], "slot": "children"}
        parent = stack[-1][1]
        parent[parent["slot"]].append(node)
        stack.append((indent, node))
    return root["children"]


def thunk_annotations(metadata: str) -> dict[int, str]:
    """thunk id -> its HLO instruction name, from XLA's thunk_metadata dump."""
    return {int(i): name for name, i in
            re.findall(r'profile_annotation:\s*"([^"]+)"\s*thunk_id:\s*(\d+)', metadata)}


def count_thunks(sequence: str, metadata: str, trips: dict[str, int]) -> dict[str, Any]:
    """Kernels the GPU runtime runs per step and host-side launches (a command buffer = one), loops multiplied
    by `trips` (while instruction name -> known trip count, from `count_hlo`'s `hlo_whiles`)."""
    names = thunk_annotations(metadata)
    kinds: collections.Counter = collections.Counter()
    loops: list[dict[str, Any]] = []

    def tally(nodes: list[dict[str, Any]], in_buffer: bool, reps: int) -> tuple[int, int]:
        kernels = launches = 0
        for node in nodes:
            kind = node["kind"]
            if kind == "kWhile":
                trip = trips.get(names.get(node["id"], ""))
                n = trip if trip is not None else 1
                k_body, l_body = tally(node["body"], in_buffer, reps * n)
                k_cond, l_cond = (0, 0) if trip is not None else tally(node["cond"], in_buffer, reps * n)
                loops.append({"name": names.get(node["id"]), "trip_count": trip, "body_kernels": k_body,
                              "body_launches": l_body,
                              "body_command_buffers": sum(1 for c in node["body"] if c["kind"] == "kCommandBuffer")})
                kernels += n * (k_body + k_cond)
                launches += n * (l_body + l_cond)
            elif kind == "kCommandBuffer":
                k, _ = tally(node["children"], True, reps)
                kernels += k
                launches += 0 if in_buffer else 1
            elif kind in CONTAINER_THUNKS:
                k, ln = tally(node["children"] + node["body"], in_buffer, reps)
                kernels, launches = kernels + k, launches + ln
            else:
                kinds[kind] += reps
                kernels += 1
                launches += 0 if in_buffer else 1
        return kernels, launches

    tree = parse_thunks(sequence)
    kernels, launches = tally(tree, False, 1)

    def n_buffers(nodes: list[dict[str, Any]]) -> int:
        return sum((n["kind"] == "kCommandBuffer") + n_buffers(n["children"] + n["cond"] + n["body"]) for n in nodes)

    return {"thunk_kernels_per_step": kernels, "thunk_launches_per_step": launches,
            "thunk_kinds_per_step": dict(kinds), "command_buffers": n_buffers(tree),
            "entry_command_buffers": sum(1 for n in tree if n["kind"] == "kCommandBuffer"),
            "thunk_whiles": sorted(loops, key=lambda w: -(w["trip_count"] or 1) * w["body_kernels"])}


# --------------------------------------------------------------------------------------------- compiling


def target_name(target_config: str) -> str | None:
    """The device a GpuTargetConfig text proto describes (its `device_description_str`), None if unnamed."""
    m = re.search(r'device_description_str:\s*"([^"]+)"', target_config)
    return m.group(1) if m else None


def abstract_args(cfg: Any, spec: ObsSpec, batch: int, seq: int, sharding: Any) -> tuple[Any, Any, Any]:
    """The train step's (learner state, batch, key) as shapes only, placed with `sharding` (None: default)."""
    learner = create_learner(cfg, spec, seed=0)
    args = (learner.state, synthetic_batch(spec, batch, seq), jax.random.key(0))
    return learner.graphdef, *jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), args)


def cuda_sharding(target_config: str) -> Any:
    """A replicated sharding on one deviceless CUDA device described by `target_config`."""
    from jax.experimental import topologies
    from jax.sharding import NamedSharding, PartitionSpec

    try:
        topo = topologies.get_topology_desc(platform="cuda", target_config=target_config, topology="1x1x1")
    except NotImplementedError as e:  # jax without its CUDA plugin
        raise SystemExit(f"{e}: --platform cuda needs jax's CUDA plugin (pip install "
                         f"\"jax[cuda12]=={jax.__version__}\" in a separate venv; no GPU needed), "
                         "or use --platform cpu") from e
    return NamedSharding(topologies.make_mesh(topo, (1,), ("x",)), PartitionSpec())


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    cuda = args.platform == "cuda"
    # compiled here for another platform than the host's: `auto` loop settings are the target's, written out
    cfg = with_loops_for(build_config(args.size, args.obs_dim, False, 64, args.batch, args.seq, args.set),
                         "gpu" if cuda else "cpu")
    spec = ObsSpec.from_config(cfg, proprio_dim=max(args.obs_dim, 1), act_dim=args.act_dim)
    target = args.target_config
    sharding = cuda_sharding(target) if cuda else None
    graphdef, state, batch, key = abstract_args(cfg, spec, args.batch, args.seq, sharding)
    lowered = make_train_step(cfg, graphdef).lower(state, batch, key)
    base = {"benchmark": "gpu_kernels", "platform": args.platform,
            "target": target_name(target) if cuda else "local cpu",
            "size": args.size, "batch": args.batch, "seq": args.seq, "obs_dim": args.obs_dim, "act_dim": args.act_dim,
            "dtype": cfg.model.compute_dtype, "observe_unroll": cfg.model.observe_unroll,
            "imag_horizon": cfg.behavior.imag_horizon, "imag_unroll": cfg.behavior.imag_unroll,
            "observe_remat": cfg.model.observe_remat, "observe_param_grads": cfg.model.observe_param_grads,
            "overrides": list(args.set), "jax": jax.__version__, "code": git_commit()}
    records = []
    for variant in (args.command_buffer or ["default"]) if cuda else ["n/a"]:
        with tempfile.TemporaryDirectory(prefix="gpu_kernels_") as dump:
            options: dict[str, Any] = {}
            if cuda:
                options["xla_dump_to"] = dump
                if COMMAND_BUFFER_VARIANTS[variant] is not None:
                    options["xla_gpu_enable_command_buffer"] = COMMAND_BUFFER_VARIANTS[variant]
            t0 = time.perf_counter()
            compiled = lowered.compile(compiler_options=options or None)
            record = {**base, "command_buffer": variant, "compile_s": round(time.perf_counter() - t0, 1)}
            record.update(count_hlo(compiled.as_text()))
            if cuda:
                trips = {w["name"]: w["trip_count"] for w in record["hlo_whiles"] if w["trip_count"] is not None}
                record.update(read_thunk_counts(Path(dump), trips))
        records.append(record)
    return records


def read_thunk_counts(dump: Path, trips: dict[str, int]) -> dict[str, Any]:
    """Thunk counts from an `xla_dump_to` folder (the sequence after XLA's thunk passes when it wrote one)."""
    seqs = sorted(dump.glob("*thunk_sequence_after_thunk_passes.txt")) or sorted(dump.glob("*thunk_sequence.txt"))
    metas = sorted(dump.glob("*thunk_metadata.txt"))
    if not seqs or not metas:
        return {"thunk_sequence": None}
    options = "".join(p.read_text() for p in sorted(dump.glob("*.config.pbtxt"))[-1:])
    min_graph = re.search(r"xla_gpu_graph_min_graph_size:\s*(\d+)", options)
    return {"thunk_sequence": seqs[-1].name.split(".")[-2],
            "command_buffer_kinds": re.findall(r"xla_gpu_enable_command_buffer:\s*(\w+)", options),
            "command_buffer_min_graph_size": int(min_graph.group(1)) if min_graph else None,
            **count_thunks(seqs[-1].read_text(), metas[-1].read_text(), trips)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from muse_common.arg_parser import ArgumentParser, path_arg

    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--platform", choices=("cuda", "cpu"), default="cuda",
                   help="cuda: compile deviceless for --target-config (needs jax's CUDA plugin, no GPU); "
                        "cpu: compile for this machine's CPU (HLO counts only)")
    p.add_argument("--target-config", metavar="FILE",
                   help="a GpuTargetConfig text proto naming its device_description_str (default: an H100 SXM)")
    p.add_argument("--size", default="size1m", help=f"model size preset: {', '.join(MODEL_SIZES)}")
    p.add_argument("--batch", type=int, default=16, help="B, sequences per train batch")
    p.add_argument("--seq", type=int, default=64, help="T, sequence length")
    p.add_argument("--obs-dim", type=int, default=24, help="vector observation size D")
    p.add_argument("--act-dim", type=int, default=6, help="continuous action size A")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. --set model.compute_dtype=bfloat16 --set model.observe_unroll=8")
    p.add_argument("--command-buffer", action="append", choices=tuple(COMMAND_BUFFER_VARIANTS),
                   help="XLA command-buffer setting to compile under, repeatable (CUDA only): default (XLA's), "
                        "off (none), while (the defaults plus WHILE); one JSON line each (default: default)")
    p.add_argument("--out", type=path_arg, help="also append each JSON record to this JSONL file")
    args = p.parse_args(argv)
    for name in ("batch", "seq", "obs_dim", "act_dim"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.target_config is None:
        args.target_config = H100_TARGET_CONFIG
    else:
        try:
            args.target_config = Path(args.target_config).read_text()[:1_000_000]
        except (OSError, UnicodeDecodeError) as e:
            p.error(f"--target-config {args.target_config}: cannot be read as text ({e.__class__.__name__})")
        if target_name(args.target_config) is None:
            p.error("--target-config: no device_description_str \"...\" in it; give a GpuTargetConfig text proto")
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if args.platform == "cuda":  # the plugin checks the CUDA driver's version at start-up; there is no GPU here
        os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    records = run(args)
    for r in records:
        extra = f", {r['thunk_kernels_per_step']} kernels / {r['thunk_launches_per_step']} launches (thunks)" \
            if r.get("thunk_kernels_per_step") is not None else ""
        print(f"{r['size']} {r['dtype']} B={r['batch']} T={r['seq']} unroll {r['observe_unroll']}/{r['imag_unroll']} "
              f"[{r['platform']}, command buffer {r['command_buffer']}]: {r['hlo_kernels_per_step']} HLO kernels "
              f"per step ({r['hlo_entry_kernels']} in the entry), trip counts {r['hlo_trip_counts']}{extra}",
              file=sys.stderr)
        emit_record(r, args.out)
    return records


if __name__ == "__main__":
    main()
