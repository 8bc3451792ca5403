"""Check what ``--launch torchtitan`` writes against torchtitan's own sources and config parser.

Two halves, two interpreters (torchtitan's config code needs tyro, hwtune's needs its own venv):

1. (hwtune's Python) a sweep of strategies -- the top-3 of ``plan --launch torchtitan`` over models,
   GPU counts, batches, sequence lengths and both torchtitan kernel sets, and seeded random
   strategies that `torchtitan_refusal` accepts -- each written as its launch;
2. (``--tyro-python``, a Python with ``tyro``; torch is not needed) torchtitan's sources at
   `TORCHTITAN_COMMIT`, read with ``git show`` from ``--repo`` (a clone or the fetched mirror):
   - every option in `TORCHTITAN_CLI_OPTIONS` is a field of its section's dataclass
     (``config/configs.py``, by ``ast``) and in the frozen CLI list
     (``tests/unit_tests/test_no_new_cli_options.py``);
   - each launch's arguments are parsed as ``torchtitan.train`` parses them: ``--module``/``--config``
     stripped (``config/manager.py`` ``_load_config``), the rest by ``tyro.cli`` with torchtitan's
     own registry rules (``manager.py``), over torchtitan's own ``TrainingConfig``,
     ``ParallelismConfig``, ``CompileConfig`` (``configs.py``, run with a stub ``torch`` module:
     it reads torch only for ``enable_fsdp_symm_mem``) and activation-checkpointing configs
     (``distributed/activation_checkpoint.py``, their ``Config`` classes and the subcommand
     union), in a root with ``Trainer.Config``'s field names (``trainer.py:103-111``); their
     ``__post_init__`` checks run;
   - then torchtitan's own ``ParallelDims._validate`` (``distributed/parallel_dims.py``, the
     function's source executed) and pipeline layout (``distributed/pipeline_parallel.py``
     ``_get_pipeline_metadata`` and ``_generate_llm_fqn_per_model_part``, executed, with
     ``torch.distributed.pipelining``'s schedule-name lookup stubbed: its single-stage
     schedules are GPipe and 1F1B, the rest multi-stage), and the trainer's checks transcribed
     with their lines (``trainer.py:124-128``, ``172-176``, ``296-307``, ``412-427``);
   - the parsed values are compared with the strategy: degrees, micro-batches per step, tokens,
     each pipeline rank's layers (hwtune's `_stage_layers`), recomputation and compile;
   - the kernels: the strategies are priced with flex attention and the chunked loss
     (``--framework torchtitan-flex``), and ``ast`` reads in torchtitan's sources that
     ``llama3_8b``/``llama3_70b`` run them (``models/llama3/__init__.py`` ``model_registry``'s
     default backend, ``config_registry.py``, ``models/common/config_utils.py``'s ``sdpa``
     branch, ``components/loss.py``'s ``num_chunks`` default) and that no ``model.`` option
     exists to change the backend; each rank's tokens split into the loss's slices
     (``loss.py:604-607``).

Usage::

    python benchmarks/check_torchtitan_launch.py --repo /path/to/torchtitan --tyro-python /venv/bin/python

Prints the counts (launches, accepted, failures by reason) and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


# ---------------------------------------------------------------- part 1: hwtune's launches
def emit(path: Path) -> int:
    import random

    from hwtune.cli.software import launch_constraints, launch_fields, software_fields
    from hwtune.cost.memory import LOSS_CHUNKS
    from hwtune.hardware.cluster import make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.train.estimator import _stage_layers
    from hwtune.train.launch import launch_for
    from hwtune.train.launch_torchtitan import TORCHTITAN_CLI_OPTIONS, torchtitan_refusal
    from hwtune.train.search import Constraints, plan
    from hwtune.train.strategy import Strategy

    rows = []

    def add(st: Strategy, model: str, n: int, source: str) -> None:
        spec = get_model(model)
        la = launch_for("torchtitan", st, spec, n, 8)
        per_rank = 2 if st.schedule in ("zbv", "dualpipev") else st.vpp
        rows.append({
            "source": source, "model": model, "n_gpus": n, "n_layers": spec.n_layers,
            "strategy": st.model_dump(), "args": list(la.args), "grad_accum": st.grad_accum,
            "stage_layers": [len(x) for x in _stage_layers(spec.n_layers, st.pp * per_rank, 1)],
        })  # fmt: skip

    for model, counts, seqs in (
        ("llama3.1-8b", (8, 16, 64), (4096, 8192)),
        ("llama3.1-70b", (32, 64, 128), (4096, 8192)),
        ("mixtral-8x7b", (16, 64), (4096,)),
        ("deepseek-v3", (256,), (4096,)),
    ):
        spec = get_model(model)
        for n in counts:
            for seq in seqs:
                for per_gpu in (1, 4):
                    for fw in ("torchtitan-flex", "torchtitan-flex-compile"):
                        base = software_fields("best", False, "fused", "alltoall", "delayed", fw)
                        base |= launch_fields("torchtitan")
                        c = launch_constraints("torchtitan", Constraints(), spec)
                        r = plan(spec, make_cluster("h100-sxm-80gb", n), n * per_gpu, seq,
                                 top_k=3, constraints=c, base=base)  # fmt: skip
                        for e in r.top:
                            add(e.strategy, model, n, "plan")
    rng = random.Random(26)
    tries = 0
    while sum(r["source"] == "random" for r in rows) < 300 and tries < 20000:
        tries += 1
        model = rng.choice(["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b"])
        spec = get_model(model)
        tp, pp, cp, dp = (rng.choice(v) for v in ([1, 2, 4, 8], [1, 2, 4], [1, 2], [1, 2, 4, 8]))
        ep = rng.choice([1, 2, 4, 8]) if spec.moe is not None else 1
        sched = (
            rng.choice(["1f1b", "gpipe", "interleaved", "zbv", "dualpipev"]) if pp > 1 else "1f1b"
        )
        vpp = rng.choice([2, 3, 4]) if sched == "interleaved" else 1
        mb, m = rng.choice([1, 2]), rng.choice([1, 2, 4, 8]) * (pp if pp > 1 else 1)
        try:
            st = Strategy(
                tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, zero=rng.choice([0, 1, 2, 3]),
                sequence_parallel=tp > 1 and rng.random() < 0.8, micro_batch=mb,
                global_batch=mb * m * dp, seq=rng.choice([2048, 4096, 8192]), schedule=sched,
                vpp=vpp, recompute=rng.choice(["none", "selective-op", "full"]),
                precision=rng.choice(["bf16", "fp32"]),
                optimizer=rng.choice(["adam", "adam-bf16"]), attention_kernel="flex",
                loss_kernel="chunked", fused_elementwise=rng.random() < 0.5, fused_norm=True,
                overlap_tp_comm=rng.random() < 0.3, grad_reduce_dtype="fp32",
            )  # fmt: skip
            if st.precision == "fp32" and st.optimizer != "adam":
                continue
            st.validate_for(spec, st.n_gpus)
        except Exception:  # noqa: BLE001 -- a layout hwtune itself rejects
            continue
        if torchtitan_refusal(st, spec) is None:
            add(st, model, st.n_gpus, "random")
    from collections import Counter

    for key in ("schedule", "zero", "recompute", "precision", "fused_elementwise"):
        seen = Counter(str(r["strategy"][key]) for r in rows if key != "schedule"
                       or r["strategy"]["pp"] > 1)  # fmt: skip
        print(f"  {key}: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))
    print(f"  with expert parallelism: {sum(r['strategy']['ep'] > 1 for r in rows)}")
    # controls: launches broken on purpose, each of which torchtitan's checks must reject
    pp_row = next(r for r in rows if r["strategy"]["pp"] > 1)
    flat = next(r for r in rows if r["strategy"]["pp"] == 1)

    def mutate(row: dict, what: str, old: str, new: str | None) -> None:
        args = list(row["args"])
        if old == "<subcommand first>":
            args = [args[-1], *args[:-1]]
        else:
            i = args.index(old)
            args[i : i + 1] = [] if new is None else [new]
        rows.append({**row, "source": f"control: {what}", "args": args})

    mutate(
        pp_row,
        "a schedule torch does not have",
        "ZBVZeroBubble"
        if "ZBVZeroBubble" in pp_row["args"]
        else pp_row["args"][pp_row["args"].index("--parallelism.pipeline_parallel_schedule") + 1],
        "ZBH1",
    )
    mutate(pp_row, "CUDA graphs left on with PP", "--training.disable_cuda_graphs", None)
    mutate(flat, "the subcommand before the options", "<subcommand first>", None)
    mutate(flat, "fp16 parameters", "bfloat16", "float16")
    mutate(flat, "an unknown option", "--training.max_context_length", "--training.seq_len")
    i = flat["args"].index("--parallelism.tensor_parallel_degree")
    mutate(
        flat, "degrees over the world size", flat["args"][i + 1], str(2 * int(flat["args"][i + 1]))
    )
    doc = {"options": sorted(TORCHTITAN_CLI_OPTIONS), "rows": rows,
           "loss_chunks": LOSS_CHUNKS["chunked"]}  # fmt: skip
    path.write_text(json.dumps(doc))
    return len(rows)


# ---------------------------------------------------------------- part 2: torchtitan's parser
def _show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout  # fmt: skip


def _module(name: str, source: str | None = None, **attrs: object):  # noqa: ANN202
    import types

    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    if source is not None:
        exec(compile(source, name, "exec"), mod.__dict__)  # noqa: S102 -- torchtitan's source
    return mod


def _function(source: str, name: str, env: dict) -> object:
    """A top-level or method function of ``source``, executed on its own in ``env``."""
    import ast
    import textwrap

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            code = textwrap.dedent(ast.get_source_segment(source, node) or "")
            exec(code, env)  # noqa: S102
            return env[name]
    raise LookupError(name)


def check(path: Path, repo: str, commit: str) -> int:  # noqa: C901, PLR0915
    import ast
    import logging
    import math
    import types
    from dataclasses import field, make_dataclass

    import tyro

    doc = json.loads(path.read_text())
    src = {p: _show(repo, commit, p) for p in (
        "torchtitan/config/configs.py", "torchtitan/config/manager.py",
        "torchtitan/config/override.py", "torchtitan/config/configurable.py",
        "torchtitan/distributed/activation_checkpoint.py",
        "torchtitan/distributed/parallel_dims.py", "torchtitan/distributed/pipeline_parallel.py",
        "tests/unit_tests/test_no_new_cli_options.py",
        "torchtitan/models/llama3/__init__.py", "torchtitan/models/llama3/config_registry.py",
        "torchtitan/models/common/config_utils.py", "torchtitan/components/loss.py",
    )}  # fmt: skip
    # -- option names: dataclass fields (ast) and the frozen CLI list
    fields_of: dict[str, set[str]] = {}
    for node in ast.parse(src["torchtitan/config/configs.py"]).body:
        if isinstance(node, ast.ClassDef):
            fields_of[node.name] = {
                s.target.id for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }  # fmt: skip
    frozen: set[str] = set()
    for node in ast.parse(src["tests/unit_tests/test_no_new_cli_options.py"]).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_FROZEN_CLI_OPTIONS":
            frozen |= {ast.literal_eval(e) for e in node.value.args[0].elts}  # type: ignore[attr-defined]
    section_class = {"training": "TrainingConfig", "parallelism": "ParallelismConfig",
                     "compile": "CompileConfig"}  # fmt: skip
    bad_names = [
        o for o in doc["options"]
        if o not in frozen or o.split(".")[1] not in fields_of[section_class[o.split(".")[0]]]
    ]  # fmt: skip
    print(f"options written: {len(doc['options'])}; not torchtitan's: {bad_names or 'none'}")
    kernel_facts = _kernel_facts(src, frozen, doc["loss_chunks"])
    print("kernels the launched configurations run: " + "; ".join(
        f"{k} {'yes' if v else 'NO'}" for k, v in kernel_facts.items()))  # fmt: skip
    chunks = doc["loss_chunks"]

    # -- torchtitan's config modules, with stubs for what they import but parsing does not use
    cuda = types.SimpleNamespace(is_available=lambda: False)
    device = type("device", (), {})  # tyro registers a rule for torch.device when torch is loaded
    _module("torch", cuda=cuda, version=types.SimpleNamespace(hip=None), device=device)
    for pkg in ("torchtitan", "torchtitan.config", "torchtitan.tools", "torchtitan.observability"):
        _module(pkg, __path__=[])
    _module("torchtitan.tools.logging", logger=logging.getLogger("torchtitan"))
    _module("torchtitan.observability.structured_logger")
    sys.modules["torchtitan.observability"].structured_logger = sys.modules[
        "torchtitan.observability.structured_logger"
    ]
    configs = _module("torchtitan.config.configs", src["torchtitan/config/configs.py"])
    _module("torchtitan.config.configurable", src["torchtitan/config/configurable.py"])
    _module("torchtitan.config.override", src["torchtitan/config/override.py"])
    manager = _module("torchtitan.config.manager", src["torchtitan/config/manager.py"])
    manager.ConfigManager()  # registers torchtitan's tyro rules
    # the activation-checkpointing Config classes and their subcommand union, without the
    # policies' torch code
    ac_src = src["torchtitan/distributed/activation_checkpoint.py"]
    tree = ast.parse(ac_src)
    kept = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in (
            "ActivationCheckpointing", "FullAC", "SelectiveAC", "MemoryBudgetAC",
        ):  # fmt: skip
            node.body = [b for b in node.body if isinstance(b, ast.ClassDef) and b.name == "Config"]
            node.bases = (
                [ast.Name("Configurable", ast.Load())]
                if node.name == "ActivationCheckpointing"
                else node.bases
            )
            kept.append(node)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ActivationCheckpointingConfig"
            for t in node.targets
        ):
            kept.append(node)
    header = ast.parse("from dataclasses import dataclass, field\nfrom typing import Annotated\n"
                       "import tyro\nfrom torchtitan.config.configurable import Configurable\n")  # fmt: skip
    _module("torchtitan.distributed", __path__=[])
    ac_mod = _module("torchtitan.distributed.activation_checkpoint")
    module = ast.Module(body=header.body + kept, type_ignores=[])
    exec(compile(ast.fix_missing_locations(module), "activation_checkpoint", "exec"),
         ac_mod.__dict__)  # fmt: skip  # noqa: S102

    # Trainer.Config's sections that the launch writes (trainer.py:103-111), as real types
    # (this file's annotations are strings)
    Root = make_dataclass("Root", [  # noqa: N806
        ("training", configs.TrainingConfig, field(default_factory=configs.TrainingConfig)),
        ("parallelism", configs.ParallelismConfig,
         field(default_factory=configs.ParallelismConfig)),
        ("compile", configs.CompileConfig, field(default_factory=configs.CompileConfig)),
        ("activation_checkpoint", ac_mod.ActivationCheckpointingConfig,
         field(default_factory=ac_mod.SelectiveAC.Config)),
    ], kw_only=True)  # fmt: skip

    validate = _function(src["torchtitan/distributed/parallel_dims.py"], "_validate", {})

    class Single:  # torch.distributed.pipelining: PipelineScheduleSingle / Multi
        pass

    class Multi:
        pass

    names = {"gpipe": Single, "1f1b": Single, "interleaved1f1b": Multi, "loopedbfs": Multi,
             "interleavedzerobubble": Multi, "zbvzerobubble": Multi, "dualpipev": Multi}  # fmt: skip
    pp_env = {"math": math, "PipelineScheduleSingle": Single,
              "get_schedule_class": lambda n: names[n.lower()]}  # fmt: skip
    pp_src = src["torchtitan/distributed/pipeline_parallel.py"]
    metadata = _function(pp_src, "_get_pipeline_metadata", pp_env)
    split_parts = _function(pp_src, "_generate_llm_fqn_per_model_part", pp_env)

    failures: dict[str, int] = {}
    rejected: set[str] = set()
    examples: dict[str, str] = {}
    for row in doc["rows"]:
        st, args = row["strategy"], list(row["args"])
        try:
            rest, i = [], 0
            while i < len(args):  # manager.py _load_config: --module/--config are not tyro's
                if args[i] in ("--module", "--config"):
                    i += 2
                    continue
                rest.append(args[i])
                i += 1
            cfg = tyro.cli(Root, args=rest, default=Root(), registry=manager.custom_registry)
            par, tr = cfg.parallelism, cfg.training
            if par.num_pp_microbatches <= 0:  # trainer.py:124-128
                raise ValueError("num_pp_microbatches")
            if par.pipeline_parallel_degree > 1 and not tr.disable_cuda_graphs:  # :172-176
                raise ValueError("CUDA graphs with PP")
            dims = types.SimpleNamespace(
                dp_replicate=par.data_parallel_replicate_degree,
                dp_shard=par.data_parallel_shard_degree, cp=par.context_parallel_degree,
                tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree,
                ep=par.expert_parallel_degree, world_size=row["n_gpus"],
            )  # fmt: skip
            validate(dims)
            divisor = (dims.tp if par.enable_sequence_parallel else 1) * (
                2 * dims.cp if dims.cp > 1 else 1
            )
            if tr.num_tokens_per_microbatch_per_dp_rank % divisor:  # trainer.py:296-307
                raise ValueError("tokens per micro-batch vs TP x 2CP")
            # components/loss.py:604-607: each rank's tokens split into the loss's slices
            if (tr.num_tokens_per_microbatch_per_dp_rank // dims.cp) % chunks:
                raise ValueError("tokens per rank vs the chunked loss's slices")
            if (st["attention_kernel"], st["loss_kernel"]) != ("flex", "chunked"):
                raise ValueError("kernels other than torchtitan's")
            pp_mb = par.num_pp_microbatches if dims.pp > 1 else 1  # trainer.py:409-427
            per_dp = tr.num_tokens_per_microbatch_per_dp_rank * pp_mb
            dp_degree = dims.dp_replicate * dims.dp_shard
            if tr.num_tokens_per_train_step % (per_dp * dp_degree):
                raise ValueError("tokens per step")
            accum = tr.num_tokens_per_train_step // (per_dp * dp_degree)
            got = {
                "tp": dims.tp, "pp": dims.pp, "cp": dims.cp, "ep": dims.ep,
                "dp": dp_degree, "micro_batches": accum * pp_mb,
                "tokens": tr.num_tokens_per_microbatch_per_dp_rank,
                "seq": tr.max_context_length,
                "sp": par.enable_sequence_parallel if dims.tp > 1 else st["sequence_parallel"],
                "compile": cfg.compile.enable,
                "recompute": type(cfg.activation_checkpoint).__qualname__.split(".")[0]
                if cfg.activation_checkpoint is not None else "none",
            }  # fmt: skip
            want = {
                "tp": st["tp"], "pp": st["pp"], "cp": st["cp"], "ep": st["ep"], "dp": st["dp"],
                "micro_batches": row["grad_accum"], "tokens": st["micro_batch"] * st["seq"],
                "seq": st["seq"], "sp": st["sequence_parallel"],
                "compile": st["fused_elementwise"],
                "recompute": {"none": "none", "full": "FullAC", "selective-op": "SelectiveAC"}[
                    st["recompute"]
                ],
            }  # fmt: skip
            if got != want:
                raise ValueError(f"values {sorted(k for k in got if got[k] != want[k])}")
            if dims.pp > 1:
                n_stages, n_layers, w_in, w_out = metadata(
                    dims, par, types.SimpleNamespace(layers=[0] * row["n_layers"])
                )
                parts = split_parts(n_stages, n_layers, w_in, w_out)
                layers = [sum(x.startswith("layers.") for x in p) for p in parts]
                if layers != row["stage_layers"]:
                    raise ValueError("pipeline stage layers")
        except (Exception, SystemExit) as e:  # noqa: BLE001 -- counted by reason
            if row["source"].startswith("control"):
                rejected.add(row["source"])
                continue
            reason = type(e).__name__ + (f": {e}" if not isinstance(e, SystemExit) else "")
            failures[reason[:90]] = failures.get(reason[:90], 0) + 1
            examples.setdefault(reason[:90], " ".join(args))
    controls = [r for r in doc["rows"] if r["source"].startswith("control")]
    caught = sum(1 for r in controls if r["source"] in rejected)
    print(
        f"tyro {tyro.__version__}; controls (broken on purpose) rejected: {caught} of "
        f"{len(controls)}{'' if caught == len(controls) else ' -- the check is not discriminating'}"
    )
    n = len(doc["rows"]) - len(controls)
    plan_rows = sum(r["source"] == "plan" for r in doc["rows"])
    print(f"launches: {n} ({plan_rows} plan answers, {n - plan_rows} random strategies)")
    print(
        f"accepted by torchtitan's parsing and checks, values as modelled: {n - sum(failures.values())}"
    )
    for reason, k in sorted(failures.items(), key=lambda kv: -kv[1]):
        print(f"  {k} x {reason}\n    e.g. {examples[reason][:400]}")
    bad = failures or bad_names or caught < len(controls) or not all(kernel_facts.values())
    return 1 if bad else 0


def _kernel_facts(src: dict[str, str], frozen: set[str], chunks: int) -> dict[str, bool]:
    """What the launched Llama configurations run, read from torchtitan's sources (``ast``):
    the attention backend and loss hwtune's ``torchtitan-flex`` preset prices."""
    import ast

    def func(path: str, name: str) -> ast.FunctionDef:
        for node in ast.walk(ast.parse(src[path])):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        raise LookupError(name)

    reg = func("torchtitan/models/llama3/__init__.py", "model_registry")
    backend = {a.arg: d for a, d in zip(reg.args.args[-len(reg.args.defaults):],
                                        reg.args.defaults, strict=True)}  # fmt: skip
    facts = {"model_registry defaults to flex": ast.literal_eval(backend["attn_backend"]) == "flex"}
    for name in ("llama3_8b", "llama3_70b"):
        calls = [n for n in ast.walk(func("torchtitan/models/llama3/config_registry.py", name))
                 if isinstance(n, ast.Call)]  # fmt: skip
        regs = [c for c in calls if ast.unparse(c.func) == "model_registry"]
        loss = [c for c in calls if ast.unparse(c.func) == "ChunkedLossWrapper.Config"]
        facts[f"{name}: flex, ChunkedLossWrapper at its default slices"] = (
            len(regs) == 1 and not any(k.arg == "attn_backend" for k in regs[0].keywords)
            and len(loss) == 1 and not any(k.arg == "num_chunks" for k in loss[0].keywords)
        )  # fmt: skip
    sdpa = [n for n in ast.walk(func("torchtitan/models/common/config_utils.py",
                                     "get_attention_config"))
            if isinstance(n, ast.If) and "'sdpa'" in ast.unparse(n.test)]  # fmt: skip
    facts["sdpa raises for language models"] = bool(sdpa) and isinstance(sdpa[0].body[0], ast.Raise)
    default = None
    for node in ast.walk(ast.parse(src["torchtitan/components/loss.py"])):
        if isinstance(node, ast.ClassDef) and node.name == "ChunkedLossWrapper":
            for sub in ast.walk(node):
                if isinstance(sub, ast.AnnAssign) and ast.unparse(sub.target) == "num_chunks":
                    default = ast.literal_eval(sub.value)  # type: ignore[arg-type]
    facts[f"ChunkedLossWrapper num_chunks defaults to {chunks}"] = default == chunks
    facts["no model.* CLI option"] = not any(o.startswith("model.") for o in frozen)
    return facts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True, help="torchtitan git directory (clone or mirror)")
    ap.add_argument("--tyro-python", help="a Python with tyro installed (default: this one)")
    ap.add_argument("--commit", help="default: hwtune's TORCHTITAN_COMMIT")
    ap.add_argument("--parse", help=argparse.SUPPRESS)  # part 2 on a file part 1 wrote
    a = ap.parse_args()
    repo = (
        a.repo
        if a.repo.endswith(".git") or Path(a.repo, "HEAD").exists()
        else str(Path(a.repo, ".git"))
    )
    if a.parse:
        return check(Path(a.parse), repo, a.commit)
    from hwtune.train.launch_torchtitan import TORCHTITAN_COMMIT

    commit = a.commit or TORCHTITAN_COMMIT
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "launches.json")
        print(f"torchtitan {commit}; launches written: {emit(path)}")
        py = a.tyro_python or sys.executable
        cmd = [py, __file__, "--repo", repo, "--commit", commit, "--parse", str(path)]
        return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
