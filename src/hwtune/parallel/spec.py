"""The declarative strategy language: mesh degrees, module annotations and schedule directives.

A `ParallelSpec` says how one training step is laid out, in Python or YAML::

    mesh: {dp: 2, tp: 2, pp: 2, ep: 2}
    micro_batch: 1
    global_batch: 16
    seq: 4096
    stages: [10, 6]                         # layers per pipeline stage (uneven is fine)
    modules:                                # annotations, matched against module names
      - {match: "layers.*.attention", tp: 2}
      - {match: "layers.*.experts", tp: 1, ep: 2}
      - {match: "layers[0:4]", recompute: full}
    schedule: {name: dualpipev}             # or {actions: {0: ["0F0", "0B0"], 1: [...]}}

Module names (torchtitan's layout): ``embedding``, ``layers.<i>``, ``layers.<i>.attention``,
``layers.<i>.mlp`` (a dense FFN), ``layers.<i>.experts`` (routed experts), ``head``. A selector
is ``layers.*``, ``layers.3``, ``layers[a:b]`` (Python slice), optionally followed by a sub-module.
Later annotations override earlier ones. `from_strategy` turns the estimator's `Strategy` into
this language (one preset of it).

Validation (`validate`) refuses, with one line naming the annotation, whatever the model or the
cluster cannot honour: a TP degree that does not divide the heads or the global TP degree,
experts that do not divide, more stages than layers, a stage map that leaves a rank idle, a
sequence that does not split into the 2*cp equal chunks of context parallelism's load-balanced
causal layout.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from hwtune.errors import HwtuneInputError, from_validation_error
from hwtune.model.spec import ModelSpec
from hwtune.parallel import schedules as S
from hwtune.parallel.actions import Action, parse_action
from hwtune.train.strategy import Optimizer, Precision, Recompute, Strategy, check_schedule

SUBMODULES = ("attention", "mlp", "experts")
_SEL = re.compile(
    r"^(?:(embedding|head)|layers(?:\.(\*|\d+)|\[(-?\d*):(-?\d*)\]))(?:\.(attention|mlp|experts))?$"
)


class Mesh(BaseModel):
    """Degrees of the device mesh (Megatron order: tp innermost, then cp, dp, pp)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dp: StrictInt = Field(default=1, gt=0)
    tp: StrictInt = Field(default=1, gt=0)
    pp: StrictInt = Field(default=1, gt=0)
    cp: StrictInt = Field(default=1, gt=0)
    ep: StrictInt = Field(default=1, gt=0, description="expert parallel, folded over dp*cp")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp


class ModuleAnnotation(BaseModel):
    """One annotation: which modules (``match``) get which parallel treatment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    match: str
    tp: StrictInt | None = Field(
        default=None, gt=0, description="tensor-parallel degree of the module"
    )
    stage: StrictInt | None = Field(
        default=None, ge=0, description="pipeline stage of these layers"
    )
    ep: StrictInt | None = Field(default=None, gt=0, description="expert-parallel degree (experts)")
    placement: tuple[tuple[int, ...], ...] | None = Field(
        default=None, description="experts on each expert-parallel rank: [[0, 1], [2, 3]]"
    )
    recompute: Recompute | None = None

    @model_validator(mode="after")
    def _sets_something(self) -> ModuleAnnotation:
        settings = [k for k in type(self).model_fields if k != "match"]
        if all(getattr(self, k) is None for k in settings):
            raise HwtuneInputError(  # named under `modules.<i>.` by `from_validation_error`
                "match", self.match, f"a setting beside it: {', '.join(settings)}"
            )
        return self


class Overlap(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    grad_reduce: bool = True
    param_gather: bool = True
    tp_comm: bool = False
    moe_a2a: bool = False


class ScheduleDirective(BaseModel):
    """A pipeline schedule by name, or an explicit per-rank action list."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipe", "dualpipev"] = "1f1b"
    vpp: StrictInt = Field(default=1, gt=0, description="model chunks per rank (interleaved)")
    actions: dict[int, list[str]] | None = Field(
        default=None, description="rank -> actions like 0F0, 0B0, 0I1, 0W1, 0R2 (overrides name)"
    )
    stage_map: Literal["loop", "v"] | None = Field(
        default=None, description="stage -> rank for explicit actions (default: loop)"
    )

    @model_validator(mode="after")
    def _explicit_actions(self) -> ScheduleDirective:
        # a named schedule against the mesh: ParallelSpec._schedule_fits_mesh
        if self.actions is not None and self.vpp > 1:  # explicit actions name their stages
            raise HwtuneInputError(  # named under `schedule.` by `from_validation_error`
                "vpp", self.vpp, "no vpp beside explicit actions (their stages set it)"
            )
        if self.stage_map is not None and self.actions is None:
            raise HwtuneInputError(
                "stage_map",
                self.stage_map,
                "explicit actions beside it (a named schedule places its own stages)",
            )
        return self


class ParallelSpec(BaseModel):
    """A composite strategy: mesh, batch, stage layout, module annotations, schedule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mesh: Mesh = Mesh()
    precision: Precision = "bf16"
    optimizer: Optimizer = "adam"
    zero: StrictInt = Field(default=-1, ge=-1, le=3, description="-1: 3 without PP, 1 with PP")
    sequence_parallel: bool = False
    micro_batch: StrictInt = Field(default=1, gt=0)
    global_batch: StrictInt | None = Field(default=None, gt=0)
    seq: StrictInt = Field(default=4096, gt=0)
    recompute: Recompute = "none"
    stages: tuple[int, ...] | None = Field(default=None, description="layers per stage")
    modules: tuple[ModuleAnnotation, ...] = ()
    schedule: ScheduleDirective = ScheduleDirective()
    overlap: Overlap = Overlap()
    flash_attention: bool = True
    moe_imbalance: float = Field(default=1.0, ge=1.0)

    @model_validator(mode="after")
    def _schedule_fits_mesh(self) -> ParallelSpec:
        if self.schedule.actions is None:  # explicit actions name their own stages
            try:
                check_schedule(self.schedule.name, self.mesh.pp, self.schedule.vpp)
            except HwtuneInputError as e:  # the estimator's names, as this spec spells them
                path = {"vpp": "schedule.vpp", "schedule": "schedule.name"}.get(e.field, e.field)
                raise HwtuneInputError(path, e.value, e.expected) from None
        return self

    # ---- derived -------------------------------------------------------------------------
    @property
    def zero_stage(self) -> int:
        return self.zero if self.zero >= 0 else (3 if self.mesh.pp == 1 else 1)

    @property
    def global_batch_seqs(self) -> int:
        return self.global_batch or self.micro_batch * self.mesh.dp

    @property
    def n_micro(self) -> int:
        """Micro-batches per step per data-parallel rank."""
        return self.global_batch_seqs // (self.micro_batch * self.mesh.dp)

    @property
    def explicit(self) -> bool:
        return self.schedule.actions is not None

    def n_stages(self) -> int:
        if self.explicit:
            acts = self.parsed_actions()
            return 1 + max((p.stage for v in acts.values() for a in v for p in a.parts), default=0)
        return S.n_stages(self.schedule.name, self.mesh.pp, self.schedule.vpp)

    def n_chunks(self) -> int:
        """Model pieces (stages, or p for DualPipe whose two directions share pieces)."""
        if self.explicit:
            return self.n_stages()
        return S.model_chunks(self.schedule.name, self.mesh.pp, self.schedule.vpp)

    def stage_rank(self, stage: int) -> int:
        if self.explicit:
            if self.schedule.stage_map == "v":
                return S.stage_rank("zbv", self.mesh.pp, stage)
            return stage % self.mesh.pp
        return S.stage_rank(self.schedule.name, self.mesh.pp, stage)

    def chunk_of_stage(self, stage: int) -> int:
        if self.explicit:
            return stage
        return S.chunk_of_stage(self.schedule.name, self.mesh.pp, stage)

    def parsed_actions(self) -> dict[int, list[Action]]:
        assert self.schedule.actions is not None
        return {
            int(r): [parse_action(a, f"schedule.actions[{r}][{i}]") for i, a in enumerate(v)]
            for r, v in self.schedule.actions.items()
        }

    def base_strategy(self) -> Strategy:
        """The estimator's `Strategy` with the global degrees (what its cost functions take)."""
        name = self.schedule.name
        sched = name if not self.explicit else "1f1b"
        return Strategy(
            precision=self.precision, dp=self.mesh.dp, tp=self.mesh.tp, pp=self.mesh.pp,
            ep=self.mesh.ep, cp=self.mesh.cp, sequence_parallel=self.sequence_parallel,
            zero=self.zero_stage, micro_batch=self.micro_batch, global_batch=self.global_batch,
            seq=self.seq, vpp=self.schedule.vpp if sched == "interleaved" else 1, schedule=sched,
            recompute=self.recompute, optimizer=self.optimizer,
            overlap_grad_reduce=self.overlap.grad_reduce,
            overlap_param_gather=self.overlap.param_gather, overlap_tp_comm=self.overlap.tp_comm,
            overlap_moe_a2a=self.overlap.moe_a2a, flash_attention=self.flash_attention,
            moe_imbalance=self.moe_imbalance,
        )  # fmt: skip

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_defaults=True), sort_keys=False)


# ---- construction ----------------------------------------------------------------------------
def make_spec(data: dict | None = None, **fields: object) -> ParallelSpec:
    """A spec from a mapping (the YAML form) and/or keywords, with one-line errors."""
    try:
        return ParallelSpec(**spec_fields(data, **fields))
    except ValidationError as e:
        raise from_validation_error(e, where="strategy") from None


def spec_fields(data: dict | None = None, **fields: object) -> dict:
    """The mapping `make_spec` validates: ``data`` with the keywords that are not None over
    it, degrees under ``mesh`` and ``vpp`` under ``schedule`` (the YAML form's shorthands
    ``dp: 2``, ``schedule: 1f1b`` and ``vpp: 2`` spelled out); nothing checked but the shape
    of ``mesh``; a shorthand in ``data`` that says otherwise than its spelled-out field
    (``dp: 2`` beside ``mesh: {dp: 4}``) is refused, as is a schedule that gives both a
    ``name`` and an explicit ``actions`` list (the list is what runs)."""
    _refuse_contradictions(data or {})
    d = dict(data or {})
    d.update({k: v for k, v in fields.items() if v is not None})
    mesh = d.pop("mesh", {}) or {}
    if not isinstance(mesh, dict):
        raise HwtuneInputError("mesh", mesh, "a mapping of degrees like {dp: 2, pp: 2}")
    mesh = dict(mesh)
    for k in ("dp", "tp", "pp", "cp", "ep"):
        if k in d:
            mesh[k] = d.pop(k)
    d["mesh"] = mesh
    sched = d.get("schedule")
    if isinstance(sched, str):
        d["schedule"] = {"name": sched}
    if "vpp" in d:
        sched = d.get("schedule") or {}
        if not isinstance(sched, dict):
            raise HwtuneInputError(
                "schedule", sched, "a schedule name or a mapping like {name: interleaved, vpp: 2}"
            )
        d["schedule"] = {**sched, "vpp": d.pop("vpp")}
    return d


def _refuse_contradictions(data: dict) -> None:
    """One strategy file saying two things: a top-level degree or ``vpp`` beside a different
    ``mesh``/``schedule`` value, or a schedule ``name`` beside its explicit ``actions``."""
    mesh = data.get("mesh")
    if isinstance(mesh, dict):
        for k in ("dp", "tp", "pp", "cp", "ep"):
            if k in data and k in mesh and data[k] != mesh[k]:
                raise HwtuneInputError(
                    k, data[k], f"one {k} (the file also says mesh.{k}: {mesh[k]})"
                )
    sched = data.get("schedule")
    if isinstance(sched, dict):
        if "vpp" in data and "vpp" in sched and data["vpp"] != sched["vpp"]:
            raise HwtuneInputError(
                "vpp", data["vpp"], f"one vpp (the file also says schedule.vpp: {sched['vpp']})"
            )
        if "actions" in sched and "name" in sched:
            raise HwtuneInputError(
                "schedule.name", sched["name"],
                "no name beside an explicit actions list (the list is the schedule that runs)",
            )  # fmt: skip


def read_spec_file(path: str | Path) -> dict:
    """The mapping of strategy fields in a YAML (or JSON) file, unvalidated (`make_spec`
    checks it, with any fields given besides)."""
    from hwtune.structured_file import read_structured

    data = read_structured(path, "strategy")
    if not isinstance(data, dict):
        what = "an empty file" if data is None else type(data).__name__
        raise HwtuneInputError(Path(path).name, what, "a mapping of strategy fields")
    return data


def load_spec(path: str | Path) -> ParallelSpec:
    """A spec from a YAML file; a bad field is named in the file (``s.yaml.mesh.dp``)."""
    name = Path(path).name
    data = read_spec_file(path)
    try:
        return make_spec(data)
    except HwtuneInputError as e:
        field = e.field.removeprefix("strategy.")
        raise HwtuneInputError(f"{name}.{field}", e.value, e.expected) from None


def from_strategy(st: Strategy) -> ParallelSpec:
    """The estimator's `Strategy` as a spec (uniform stages, one TP degree, a named schedule)."""
    if st.fp8_param_gather:  # the compiler prices 16-bit weights and gathers
        raise HwtuneInputError(
            "fp8_param_gather", True, "False (the parallel compiler has no fp8 parameters)"
        )
    return make_spec(
        dp=st.dp, tp=st.tp, pp=st.pp, cp=st.cp, ep=st.ep, precision=st.precision,
        optimizer=st.optimizer, zero=st.zero, sequence_parallel=st.sequence_parallel,
        micro_batch=st.micro_batch, global_batch=st.global_batch, seq=st.seq,
        recompute=st.recompute, schedule={"name": st.schedule, "vpp": st.vpp},
        overlap={"grad_reduce": st.overlap_grad_reduce, "param_gather": st.overlap_param_gather,
                 "tp_comm": st.overlap_tp_comm, "moe_a2a": st.overlap_moe_a2a},
        flash_attention=st.flash_attention, moe_imbalance=st.moe_imbalance,
    )  # fmt: skip


# ---- resolution: what each layer gets --------------------------------------------------------
class LayerPlan(BaseModel):
    """What the annotations resolve to for one layer."""

    model_config = ConfigDict(frozen=True)

    index: int
    stage: int
    tp_attention: int
    tp_ffn: int
    ep: int
    recompute: Recompute
    placement: tuple[tuple[int, ...], ...] | None = None


def _selects(sel: re.Match, i: int, n: int) -> bool:
    if sel.group(1):
        return False
    if sel.group(2) is not None:
        return sel.group(2) == "*" or int(sel.group(2)) == i
    a = int(sel.group(3)) if sel.group(3) else None
    b = int(sel.group(4)) if sel.group(4) else None
    return i in range(n)[slice(a, b)]


def _where(i: int, ann: ModuleAnnotation) -> str:
    return f"modules[{i}] '{ann.match}'"


def even_stages(n_layers: int, chunks: int) -> tuple[int, ...]:
    """Layers per stage, remainder to the first stages (as `estimator._stage_layers`)."""
    base, extra = divmod(n_layers, chunks)
    return tuple(base + (1 if c < extra else 0) for c in range(chunks))


def resolve(spec: ParallelSpec, model: ModelSpec) -> tuple[LayerPlan, ...]:
    """Per layer: stage (model chunk), TP degrees, EP degree, expert placement, recompute."""
    n, mesh = model.n_layers, spec.mesh
    chunks = spec.n_chunks()
    tp_a = [mesh.tp] * n
    tp_f = [mesh.tp] * n
    ep = [mesh.ep] * n
    rec = [spec.recompute] * n
    place: list[tuple[tuple[int, ...], ...] | None] = [None] * n
    pinned: dict[int, int] = {}
    for k, ann in enumerate(spec.modules):
        m = _SEL.match(ann.match.replace(" ", ""))
        if not m:
            raise HwtuneInputError(
                f"modules[{k}].match", ann.match,
                "embedding, head, layers.*, layers.<i> or layers[a:b], optionally .attention/.mlp/.experts",
            )  # fmt: skip
        sub = m.group(5)
        _check_annotation(k, ann, sub, model, spec)
        hit = [i for i in range(n) if _selects(m, i, n)]
        if not hit and not m.group(1):
            raise HwtuneInputError(
                _where(k, ann), ann.match, f"a selector that names some of the {n} layers"
            )
        if m.group(1):  # the costs and the runtime give them the mesh's tp and no recompute
            raise HwtuneInputError(
                _where(k, ann),
                ann.match,
                "annotations on layers (embedding and head follow the first and last stage"
                " at the mesh's tp)",
            )
        if ann.recompute is not None and sub is not None:
            raise HwtuneInputError(
                _where(k, ann) + ".recompute",
                ann.recompute,
                "recomputation of whole layers (no .attention/.mlp/.experts)",
            )
        if sub == "experts" and model.moe is None:
            raise HwtuneInputError(
                _where(k, ann), ann.match, f"no .experts on the dense model {model.name}"
            )
        if sub == "mlp" and model.moe is not None and all(model.is_moe_layer(i) for i in hit):
            raise HwtuneInputError(
                _where(k, ann), ann.match, "a dense .mlp (these layers have .experts)"
            )
        for i in hit:
            if ann.tp is not None:
                if sub in (None, "attention"):
                    tp_a[i] = ann.tp
                if sub in (None, "mlp", "experts"):
                    tp_f[i] = ann.tp
            if ann.ep is not None or ann.placement is not None:
                if sub not in (None, "experts"):
                    raise HwtuneInputError(
                        _where(k, ann) + ".ep",
                        ann.ep,
                        "expert placement on .experts (or whole layers)",
                    )
                if model.is_moe_layer(i):
                    ep[i] = ann.ep or (len(ann.placement) if ann.placement else mesh.ep)
                    place[i] = ann.placement
            if ann.recompute is not None:
                rec[i] = ann.recompute
            if ann.stage is not None:
                if sub is not None:
                    raise HwtuneInputError(
                        _where(k, ann) + ".stage",
                        ann.stage,
                        "a stage for whole layers (no .attention/.mlp)",
                    )
                pinned[i] = ann.stage

    # stages: pinned layers, else `stages`, else even
    if pinned:
        if len(pinned) != n:
            missing = next(i for i in range(n) if i not in pinned)
            raise HwtuneInputError(
                "modules.stage",
                f"layer {missing} unassigned",
                "a stage for every layer once any layer is pinned",
            )
        stage_of = [pinned[i] for i in range(n)]
        if any(b < a for a, b in zip(stage_of, stage_of[1:], strict=False)):
            raise HwtuneInputError(
                "modules.stage", stage_of, "stages that do not decrease along the layers"
            )
        counts = tuple(stage_of.count(c) for c in range(chunks))
        if max(stage_of) >= chunks:
            raise HwtuneInputError(
                "modules.stage", max(stage_of), f"a stage below the {chunks} stages of the schedule"
            )
        if spec.stages is not None and tuple(spec.stages) != counts:  # was ignored silently
            raise HwtuneInputError(
                "stages", list(spec.stages),
                f"the layers per stage that the modules' stage pins give, {list(counts)} (set "
                "the layout in one place)",
            )  # fmt: skip
    elif spec.stages is not None:
        counts = spec.stages
    else:
        if n < chunks:
            raise HwtuneInputError("pp*vpp", chunks, f"at most the {n} layers of {model.name}")
        counts = even_stages(n, chunks)
    if len(counts) != chunks:
        raise HwtuneInputError(
            "stages", list(counts), f"{chunks} entries (one per stage of the schedule)"
        )
    if sum(counts) != n:
        raise HwtuneInputError("stages", list(counts), f"layer counts summing to the {n} layers")
    if any(c < 1 for c in counts):
        raise HwtuneInputError("stages", list(counts), "at least one layer in every stage")
    stage_of = [c for c, cnt in enumerate(counts) for _ in range(cnt)]
    return tuple(
        LayerPlan(
            index=i,
            stage=stage_of[i],
            tp_attention=tp_a[i],
            tp_ffn=tp_f[i],
            ep=ep[i],
            recompute=rec[i],
            placement=place[i],
        )  # fmt: skip
        for i in range(n)
    )


def _check_annotation(
    k: int, ann: ModuleAnnotation, sub: str | None, model: ModelSpec, spec: ParallelSpec
) -> None:
    w = _where(k, ann)
    mesh = spec.mesh
    if ann.tp is not None:
        if mesh.tp % ann.tp:
            raise HwtuneInputError(w + ".tp", ann.tp, f"a divisor of the mesh's tp={mesh.tp}")
        if sub in (None, "attention") and model.n_heads % ann.tp:
            raise HwtuneInputError(
                w + ".tp", ann.tp, f"a divisor of the {model.n_heads} attention heads"
            )
        if sub in (None, "mlp") and model.ffn_hidden % ann.tp:
            raise HwtuneInputError(
                w + ".tp", ann.tp, f"a divisor of the FFN width {model.ffn_hidden}"
            )
    if ann.ep is not None or ann.placement is not None:
        if model.moe is None:
            raise HwtuneInputError(w + ".ep", ann.ep, "no expert annotation on a dense model")
        e = model.moe.n_routed_experts
        ep = ann.ep or (len(ann.placement) if ann.placement else mesh.ep)
        fold = mesh.dp * mesh.cp * mesh.tp // (ann.tp or mesh.tp)
        if ann.ep is not None and e % ann.ep:
            raise HwtuneInputError(w + ".ep", ann.ep, f"a divisor of the {e} experts")
        if fold % ep:
            raise HwtuneInputError(
                w + ".ep", ep, f"a divisor of the ranks it folds over (dp*cp*tp/expert-tp = {fold})"
            )
        if ann.placement is not None:
            flat = sorted(x for grp in ann.placement for x in grp)
            if len(ann.placement) != ep:
                raise HwtuneInputError(
                    w + ".placement",
                    len(ann.placement),
                    f"one list per expert-parallel rank ({ep})",
                )
            if flat != list(range(e)):
                raise HwtuneInputError(
                    w + ".placement",
                    list(ann.placement),
                    f"each of the {e} experts on exactly one rank",
                )


def _check_expert_mesh(mesh: Mesh, model: ModelSpec) -> None:
    """The mesh's expert-parallel degree against the model and the tensor x context x data
    ranks it folds over (also for explicit schedules, which skip the estimator's schedule checks)."""
    if mesh.ep == 1:
        return
    if model.moe is None:
        raise HwtuneInputError("mesh.ep", mesh.ep, f"1 for the dense model {model.name}")
    e = model.moe.n_routed_experts
    if e % mesh.ep:
        raise HwtuneInputError("mesh.ep", mesh.ep, f"a divisor of the {e} experts")
    fold = mesh.tp * mesh.cp * mesh.dp
    if fold % mesh.ep:
        raise HwtuneInputError("mesh.ep", mesh.ep, f"a divisor of tp x cp x dp (= {fold})")


def validate(
    spec: ParallelSpec, model: ModelSpec, n_gpus: int | None = None
) -> tuple[LayerPlan, ...]:
    """Check the spec against the model and the cluster; one-line errors; the resolved layers."""
    mesh = spec.mesh
    if n_gpus is not None and mesh.world != n_gpus:
        raise HwtuneInputError("n_gpus", n_gpus, f"the strategy's GPUs, dp*tp*pp*cp = {mesh.world}")
    if mesh.cp > 1 and spec.seq % (2 * mesh.cp):
        # load-balanced causal layout (Megatron-LM, TransformerEngine): 2*cp equal chunks,
        # chunks i and 2*cp-1-i on cp rank i (also for explicit schedules)
        raise HwtuneInputError(
            "seq", spec.seq, f"a multiple of 2*cp = {2 * mesh.cp} (two equal chunks per cp rank)"
        )
    st = spec.base_strategy()
    if not spec.explicit or mesh.pp == 1:
        # the estimator's checks of the global degrees (heads, experts, batch, schedule)
        st.validate_for(model, None)
    _check_expert_mesh(mesh, model)
    from hwtune.train.schedules import MAX_MICRO_BATCHES

    if spec.global_batch_seqs > MAX_MICRO_BATCHES * spec.micro_batch * mesh.dp:
        raise HwtuneInputError(
            "global_batch", spec.global_batch_seqs,
            f"at most {MAX_MICRO_BATCHES:,} micro-batches of micro_batch x dp (= "
            f"{spec.micro_batch} x {mesh.dp}) sequences per step",
        )  # fmt: skip
    if spec.global_batch_seqs % (spec.micro_batch * mesh.dp):
        raise HwtuneInputError(
            "global_batch",
            spec.global_batch_seqs,
            f"a multiple of micro_batch x dp (= {spec.micro_batch} x {mesh.dp} = {spec.micro_batch * mesh.dp})",
        )
    layers = resolve(spec, model)
    nst = spec.n_stages()
    used = {spec.stage_rank(s) for s in range(nst)}
    if nst and max(used) >= mesh.pp:
        raise HwtuneInputError(
            "schedule", f"{nst} stages", f"stages mapped onto the pp={mesh.pp} ranks"
        )
    if len(used) != mesh.pp:
        idle = sorted(set(range(mesh.pp)) - used)
        raise HwtuneInputError(
            "schedule",
            f"rank {idle[0]} without a stage",
            f"every one of the pp={mesh.pp} ranks holding a stage",
        )
    if spec.explicit:
        acts = spec.parsed_actions()
        bad = sorted(set(acts) - set(range(mesh.pp)))
        if bad:
            raise HwtuneInputError("schedule.actions", f"rank {bad[0]}", f"ranks 0..{mesh.pp - 1}")
        for r, v in acts.items():
            for i, a in enumerate(v):
                for p in a.parts:
                    if spec.stage_rank(p.stage) != r:
                        raise HwtuneInputError(
                            f"schedule.actions[{r}][{i}]",
                            str(a),
                            f"a stage that lives on rank {r} (stage {p.stage} is on rank {spec.stage_rank(p.stage)})",
                        )
                    if p.mb >= spec.n_micro:
                        raise HwtuneInputError(
                            f"schedule.actions[{r}][{i}]",
                            str(a),
                            f"a micro-batch below the {spec.n_micro} of the step",
                        )
    return layers
