"""`hwtune serve --launch trtllm` against TensorRT-LLM's own argument model, without importing it.

Reads, with `ast` (tensorrt_llm does not import without a GPU), the click options of
``trtllm-serve`` (``tensorrt_llm/commands/serve.py``: the ``@click.option`` names of the
``@click.command("serve")`` function and the ``--backend`` choices) and the pydantic models of
the LLM API (``tensorrt_llm/llmapi/llm_args.py``: each class's annotated fields with those of
its bases in the file, the members of its enums, a field's ``Literal`` values, the dtypes
``KvCacheConfig.validate_dtype`` names). Then it launches a sweep of deployments (every layout
``serve plan --launch trtllm`` keeps for a set of models, GPUs and budgets, plus seeded random
replicas with TensorRT-LLM's knobs set) and checks each: every flag an option of
``trtllm-serve``, the backend one of its choices, every top-level YAML key a field of
``TorchLlmArgs`` and every nested key a field of the model its annotation names, every enum or
Literal value one of the allowed. Prints the counts of deployments accepted and rejected (and
hwtune's own refusals, which are not launched), with the reasons.

    python benchmarks/check_trtllm_launch.py PATH/TO/TensorRT-LLM [--samples 2000] [--json]

PATH is a checkout of NVIDIA/TensorRT-LLM (the two files above under it). This checks names and
values only, not the validators that run when the model loads (GPU checks, cross-field rules).
"""

from __future__ import annotations

import argparse
import ast
import json
import random
from collections import Counter
from pathlib import Path

import yaml

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.engines import engine_fields
from hwtune.serve.launch import trtllm_launch, trtllm_refusal
from hwtune.serve.plan import candidates

ENUM_BASES = {"Enum", "StrEnum", "IntEnum"}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _literal(node: ast.AST | None) -> set[object] | None:
    """The values of a ``Literal[...]`` annotation, else None."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        return None
    if node.value.id != "Literal":
        return None
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return {e.value for e in elts if isinstance(e, ast.Constant)}


def serve_options(path: Path) -> tuple[set[str], set[str]]:
    """(every option name of ``trtllm-serve``, the ``--backend`` choices)."""
    tree = ast.parse(path.read_text())
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        decos = [d for d in fn.decorator_list if isinstance(d, ast.Call)]
        is_serve = any(
            isinstance(d.func, ast.Attribute) and d.func.attr == "command"
            and d.args and isinstance(d.args[0], ast.Constant) and d.args[0].value == "serve"
            for d in decos
        )  # fmt: skip
        if not is_serve:
            continue
        opts: set[str] = set()
        backends: set[str] = set()
        for d in decos:
            if not (isinstance(d.func, ast.Attribute) and d.func.attr == "option"):
                continue
            names = {a.value for a in d.args if isinstance(a, ast.Constant)
                     and isinstance(a.value, str) and a.value.startswith("--")}  # fmt: skip
            opts |= names
            if "--backend" in names:
                for kw in d.keywords:
                    if kw.arg == "type":
                        for n in ast.walk(kw.value):
                            if isinstance(n, ast.List):
                                backends |= {e.value for e in n.elts
                                             if isinstance(e, ast.Constant)}  # fmt: skip
        return opts, backends
    raise SystemExit(f"no @click.command('serve') in {path}")


class ArgModel:
    """The classes of ``llm_args.py``: fields (with bases), enum values, Literal values."""

    def __init__(self, path: Path) -> None:
        tree = ast.parse(path.read_text())
        self.classes: dict[str, ast.ClassDef] = {}
        self.aliases: dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    self.aliases[node.target.id] = node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                t = node.targets[0]
                if isinstance(t, ast.Name):
                    self.aliases[t.id] = node.value

    def _bases(self, name: str) -> list[str]:
        c = self.classes[name]
        return [b.id for b in c.bases if isinstance(b, ast.Name)]

    def fields(self, name: str) -> dict[str, ast.AST]:
        """Annotated public fields of class ``name`` and its bases in the file."""
        out: dict[str, ast.AST] = {}
        for base in self._bases(name):
            if base in self.classes:
                out.update(self.fields(base))
        for node in self.classes[name].body:
            named = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            if named and not node.target.id.startswith("_"):  # type: ignore[union-attr]
                out[node.target.id] = node.annotation  # type: ignore[union-attr]
        return out

    def enum_values(self, name: str) -> set[object] | None:
        if name not in self.classes or not ENUM_BASES & set(self._bases(name)):
            return None
        return {node.value.value for node in self.classes[name].body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)}  # fmt: skip

    def classes_of(self, annotation: ast.AST, seen: frozenset[str] = frozenset()) -> set[str]:
        """The model classes an annotation names, through module-level aliases."""
        out: set[str] = set()
        for n in _names(annotation):
            if n in self.classes and self.enum_values(n) is None:
                out.add(n)
            elif n in self.aliases and n not in seen:
                out |= self.classes_of(self.aliases[n], seen | {n})
        return out

    def kv_dtypes(self) -> set[str]:
        """The strings ``KvCacheConfig.validate_dtype`` accepts by name."""
        for node in ast.walk(self.classes["KvCacheConfig"]):
            if isinstance(node, ast.FunctionDef) and node.name == "validate_dtype":
                return {c.value for t in ast.walk(node) if isinstance(t, ast.Tuple)
                        for c in t.elts if isinstance(c, ast.Constant)}  # fmt: skip
        return set()

    def value_problem(self, cls: str, key: str, value: object) -> str | None:
        annotation = self.fields(cls)[key]
        lit = _literal(annotation)
        if lit is not None and value not in lit:
            return f"{cls}.{key}={value!r} not in Literal"
        for n in _names(annotation):
            allowed = self.enum_values(n)
            if allowed is not None and value not in allowed:
                return f"{cls}.{key}={value!r} not a {n}"
        if cls == "KvCacheConfig" and key == "dtype" and value not in self.kv_dtypes():
            return f"KvCacheConfig.dtype={value!r} not named by validate_dtype"
        return None


def problems(f_args: list[str], opts: dict, serve: tuple[set[str], set[str]],
             model: ArgModel) -> list[str]:  # fmt: skip
    """Why TensorRT-LLM would not take this launch by name, or []."""
    options, backends = serve
    out = [f"option {a}" for a in f_args if a.startswith("--") and a not in options]
    if "--backend" in f_args and f_args[f_args.index("--backend") + 1] not in backends:
        out.append("backend choice")
    top = model.fields("TorchLlmArgs")
    for key, value in opts.items():
        if key not in top:
            out.append(f"TorchLlmArgs.{key}")
            continue
        if isinstance(value, dict):
            nested = model.classes_of(top[key])
            if not nested:
                out.append(f"{key}: no model class")
                continue
            for sub, v in value.items():
                owners = [c for c in nested if sub in model.fields(c)]
                if not owners:
                    out.append(f"{key}.{sub} ({'/'.join(sorted(nested))})")
                    continue
                p = model.value_problem(owners[0], sub, v)
                if p:
                    out.append(p)
        else:
            p = model.value_problem("TorchLlmArgs", key, value)
            if p:
                out.append(p)
    return out


def sweep(samples: int, seed: int) -> list[ReplicaConfig]:
    """Every layout `serve plan --launch trtllm` keeps for a few models, GPUs and budgets, and
    ``samples`` seeded random replicas with TensorRT-LLM's knobs set."""
    preset = engine_fields("trtllm")
    out: list[ReplicaConfig] = []
    models = ["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b"]
    for name in models:
        for gpu in ("h100-sxm-80gb", "h200-sxm-141gb", "b200"):
            base = ReplicaConfig(get_model(name), get_device(gpu), **preset)  # type: ignore[arg-type]
            for budget in (1, 2, 4, 8):
                keep = lambda c: trtllm_refusal(c) is None  # noqa: E731
                out += [d.replica for d in candidates(base, budget, disagg=False, keep=keep)]
    rng = random.Random(seed)
    for _ in range(samples):
        name = rng.choice(models)
        tp, dp = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4, 8])
        try:
            c = ReplicaConfig(
                get_model(name), get_device(rng.choice(["h100-sxm-80gb", "h200-sxm-141gb", "b200"])),
                tp=tp, dp_attention=dp, pp=rng.choice([1, 2]),
                ep=tp * dp if rng.random() < 0.5 else 1,
                max_num_seqs=rng.choice([8, 64, 256, 512]) * dp,
                max_num_batched_tokens=rng.choice([2048, 8192, 16384]),
                gpu_memory_utilization=rng.choice([0.8, 0.85, 0.9, 0.95]),
                kv_memory_rule="free", all_reduce_kernel="trtllm",
                reserve_to_completion=rng.random() < 0.5,
                scheduler=rng.choice(["orca", "vllm"]), overlap_schedule=rng.random() < 0.5,
                eager_prefill=rng.random() < 0.7, enable_prefix_caching=rng.random() < 0.5,
                adp_balance_timeout_iters=rng.choice([0, 0, 20, 60]),
                batch_wait_timeout_iters=rng.choice([0, 0, 4]),
                batch_wait_max_tokens_ratio=rng.choice([0.0, 0.5, 0.75]),
                kv_dtype=rng.choice([None, None, "fp8", "fp4"]),
                block_size=rng.choice([16, 16, 32, 64]),
                weight_only_kernel=rng.choice(["wgmma", "wgmma", "triton-mxfp4"]),
            )  # fmt: skip
        except HwtuneInputError:
            continue
        out.append(c)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path, help="a checkout of NVIDIA/TensorRT-LLM")
    ap.add_argument("--samples", type=int, default=2000, help="random replicas besides plan's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    serve = serve_options(a.repo / "tensorrt_llm/commands/serve.py")
    model = ArgModel(a.repo / "tensorrt_llm/llmapi/llm_args.py")
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    from hwtune.serve.config import Deployment

    for c in sweep(a.samples, a.seed):
        r = trtllm_refusal(c)
        if r is not None:
            refused[r.field] += 1
            counts["refused by hwtune"] += 1
            continue
        la = trtllm_launch(Deployment(c), "MODEL")
        opts = yaml.safe_load(la.files[0][1])
        bad = problems(list(la.args), opts, serve, model)
        counts["rejected" if bad else "accepted"] += 1
        reasons.update(bad)
    doc = {"counts": dict(counts), "rejections": dict(reasons), "hwtune_refusals": dict(refused)}
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    launched = counts["accepted"] + counts["rejected"]
    print(f"{launched} launches: {counts['accepted']} accepted, {counts['rejected']} rejected "
          f"by name; {counts['refused by hwtune']} replicas refused by hwtune first")  # fmt: skip
    for k, v in reasons.most_common():
        print(f"  rejected: {k} x{v}")
    for k, v in refused.most_common():
        print(f"  hwtune refusal: {k} x{v}")


if __name__ == "__main__":
    main()
