"""Per-rank orders of the pipeline schedules: which stage, which micro-batch, forward or backward,
in what order on each pipeline rank.

The orders are generated here from the papers (the closed-form bubbles live in
`hwtune.train.schedules`; the DAG simulator measures what these orders do):

- GPipe: Huang et al. 2019: all forwards, then all backwards.
- 1F1B (PipeDream-Flush): Narayanan et al. SC'21 §2.2.1: rank r runs p-r-1 warm-up forwards,
  then alternates one forward and one backward, then drains the backwards.
- Interleaved 1F1B: Narayanan et al. SC'21 §2.2.2 (Megatron-LM's
  ``forward_backward_pipelining_with_interleaving``): v model chunks per rank, stage c*p + r on
  rank r; forwards walk micro-batches in groups of p through chunk 0, 1, ..., v-1, backwards
  through v-1, ..., 0; warm-up (p-r-1)*2 + (v-1)*p; needs m divisible by p.
- ZB-H1: Qi et al. ICLR'24 "Zero Bubble Pipeline Parallelism" §3.1 (Fig. 3, handcrafted): the
  backward split into input gradient (I) and weight gradient (W); rank r runs 1F1B with I in
  place of B and each W postponed by r micro-batches, into the bubbles, under the same
  activation limit as 1F1B (p micro-batches whose W is not done); the leftover W's drain at the
  end. Bubble (p-1)(F + I - W), a third of 1F1B's when F = I = W. (The paper's greedy rule of
  §3.2, which builds ZB-V below, left 5/9 of 1F1B's bubble at p = 4 with F = I = W.)
- ZB-V: Qi et al. 2024 "Pipeline Parallelism with Controllable Memory": 2 chunks per rank in a
  V (stages r and 2p-1-r on rank r), built by the same greedy rule.
- DualPipe: DeepSeek-V3 technical report §3.2.1 (Fig. 5) and deepseek-ai/DualPipe: two
  pipelines in opposite directions over the same p ranks (each rank holds stage r of one and
  stage p-1-r of the other; each direction takes half the micro-batches), eight phases per rank
  (nF0, nF0F1, nB1W1F1, nF0B1F1B0 with overlapped forward-backward pairs, nB1F1B0, nB1B0,
  nWB0, nW), zero-bubble W's in the phases named so. DualPipeV: the same eight phases over a
  V of 2p stages on p ranks (one copy of the parameters). Bubble (DeepSeek-V3 Table 2, the
  DualPipe README for the V): (PP/2 - 1)(F&B + B - 3W) with PP = p (DualPipe) or 2p half-size
  stages (DualPipeV). The simulated orders idle exactly that with F&B = F + B (nothing
  overlapped), F = I and W <= F (tests/parallel/test_compile_followups.py); a W longer than F
  fills only the forward-sized slot it sits in, and with F != I the idle differs from the formula
  (e.g. F = 2, I = W = 1 at p = 4: 4 against 3), which counts slots as if F = I.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from hwtune.errors import HwtuneInputError
from hwtune.parallel.actions import Action, overlap

NAMES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipe", "dualpipev")
V_SHAPED = ("zbv", "dualpipe", "dualpipev")


def n_stages(name: str, pp: int, vpp: int = 1) -> int:
    """Pipeline stages of a schedule (DualPipe's two directions count as 2p stage ids)."""
    if name == "interleaved":
        return pp * vpp
    if name in V_SHAPED:
        return 2 * pp
    return pp


def model_chunks(name: str, pp: int, vpp: int = 1) -> int:
    """Distinct pieces the model is cut into (DualPipe runs p pieces twice, one per direction)."""
    return pp if name == "dualpipe" else n_stages(name, pp, vpp)


def chunk_of_stage(name: str, pp: int, stage: int) -> int:
    """Which model piece a stage runs (DualPipe: stage p+j runs piece j in the other direction)."""
    if name == "dualpipe" and stage >= pp:
        return stage - pp
    return stage


def stage_rank(name: str, pp: int, stage: int) -> int:
    """Rank of a stage: looped (stage mod p) or V-shaped (s < p: s; else 2p-1-s)."""
    if name in V_SHAPED:
        return stage if stage < pp else 2 * pp - 1 - stage
    return stage % pp


def _gpipe(p: int, m: int, r: int) -> list[Action]:
    return [Action(r, "F", i) for i in range(m)] + [Action(r, "B", i) for i in range(m)]


def _one_f_one_b(p: int, m: int, r: int) -> list[Action]:
    warm = min(p - r - 1, m)
    out = [Action(r, "F", i) for i in range(warm)]
    for i in range(m - warm):
        out += [Action(r, "F", warm + i), Action(r, "B", i)]
    out += [Action(r, "B", i) for i in range(m - warm, m)]
    return out


def _zb_h1(p: int, m: int, r: int) -> list[Action]:
    """ZB-H1 (Qi et al. ICLR'24 §3.1, Fig. 3): 1F1B with I for B, rank r's W's r behind."""
    warm = min(p - r - 1, m)
    out = [Action(r, "F", i) for i in range(warm)]
    w_next = 0
    for k in range(m):
        if warm + k < m:
            out.append(Action(r, "F", warm + k))
        out.append(Action(r, "I", k))
        if k - r >= w_next:
            out.append(Action(r, "W", w_next))
            w_next += 1
    return out + [Action(r, "W", i) for i in range(w_next, m)]


def _interleaved(p: int, m: int, v: int, r: int) -> list[Action]:
    total = m * v

    def unit(k: int, forward: bool) -> Action:
        c = (k // p) % v
        chunk = c if forward else v - 1 - c
        mb = (k // (p * v)) * p + k % p
        return Action(chunk * p + r, "F" if forward else "B", mb)

    warm = min((p - r - 1) * 2 + (v - 1) * p, total)
    out = [unit(k, True) for k in range(warm)]
    for i in range(total - warm):
        out += [unit(warm + i, True), unit(i, False)]
    out += [unit(k, False) for k in range(total - warm, total)]
    return out


def _greedy_zero_bubble(
    p: int, m: int, stages: list[list[int]], cost: Callable[[int, str], float], limit: int
) -> dict[int, list[Action]]:
    """Qi et al. §3.2's greedy rule over a chain of stages (``stages[r]``: rank r's stages in
    pipeline order): a ready I first, then a forward under the activation limit, then a W.

    The limit (micro-batch-chunks whose W is not done, per rank) is never exceeded: a forward of
    the j-th of a rank's L stages runs only while ``live + (L - j) <= limit``, leaving a slot for
    each later stage of the rank. Without that headroom, stage costs that differ let a rank fill
    its limit with first-chunk forwards of new micro-batches while the oldest micro-batch waits
    there for its second chunk: every rank stalled, and the old stall breaker ran a forward
    beyond the limit (p = 3, m = 11 with unequal stage costs: 12 chunks live against 6). With
    it the order never stalls: the live chunks of micro-batches at or after the oldest unfinished
    one k0 all sit at stages before k0's next stage j on that rank (stages run micro-batches in
    order, and a micro-batch passes a rank's stages in order), each admitted with
    ``live <= limit - (L - j)`` after it, so k0's forward fits; its I's take no slot and a
    pending W always runs. A limit below L cannot hold one micro-batch and is refused."""
    if any(len(ss) > limit for ss in stages):
        raise HwtuneInputError(
            "activation limit", limit, f"at least {max(len(ss) for ss in stages)} chunks per rank"
        )
    order_of = {s: (r, k) for r, ss in enumerate(stages) for k, s in enumerate(ss)}
    n = sum(len(ss) for ss in stages)
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, mb) -> finish time
    out: dict[int, list[Action]] = {r: [] for r in range(p)}
    free = [0.0] * p
    next_f = {s: 0 for s in range(n)}
    next_i = {s: 0 for s in range(n)}
    pending_w: list[deque[tuple[int, int]]] = [deque() for _ in range(p)]
    live = [0] * p  # micro-batch-chunks whose W is not done

    def admits(r: int, s: int) -> bool:
        """A forward of rank r's j-th stage leaves a slot for each of the rank's later stages."""
        return live[r] + len(stages[r]) - order_of[s][1] <= limit

    def ready(kind: str, s: int, mb: int) -> float | None:
        if kind == "F":
            return 0.0 if s == 0 else done.get(("F", s - 1, mb))
        if ("F", s, mb) not in done:
            return None
        if s == n - 1:
            return done[("F", s, mb)]
        return done.get(("I", s + 1, mb))

    remaining = 3 * n * m
    while remaining:
        best: tuple[float, int, int, Action] | None = None
        for r in range(p):
            cands: list[tuple[int, float, Action]] = []
            for s in stages[r]:
                if next_i[s] < m:
                    t = ready("I", s, next_i[s])
                    if t is not None:
                        cands.append((0, t, Action(s, "I", next_i[s])))
                if next_f[s] < m and admits(r, s):
                    t = ready("F", s, next_f[s])
                    if t is not None:
                        cands.append((1, t, Action(s, "F", next_f[s])))
            if pending_w[r]:
                s, mb = pending_w[r][0]
                cands.append((2, 0.0, Action(s, "W", mb)))
            if not cands:
                continue
            start_of = [(max(free[r], t), pri, a) for pri, t, a in cands]
            t0 = min(x[0] for x in start_of)
            # among what can start earliest, the highest priority; later stages of the V first,
            # for forwards too: a rank that fills its activation limit with first-chunk
            # forwards stalls the V, and the bubble grew with m (ZB-V, Qi et al. 2024)
            t_pick, pri, a = min(
                (x for x in start_of if x[0] <= t0 + 1e-15),
                key=lambda x: (x[1], -order_of[x[2].stage][1] if x[2].kind in "IF" else 0),
            )
            if best is None or (t_pick, pri, r) < best[:3]:
                best = (t_pick, pri, r, a)
        if best is None:  # unreachable with the reservation (see above); a loud failure if not
            raise RuntimeError(f"greedy zero-bubble order stalled at p={p}, m={m}")
        t, _, r, a = best
        end = t + cost(a.stage, a.kind)
        free[r] = end
        done[(a.kind, a.stage, a.mb)] = end
        out[r].append(a)
        remaining -= 1
        if a.kind == "F":
            next_f[a.stage] += 1
            live[r] += 1
        elif a.kind == "I":
            next_i[a.stage] += 1
            pending_w[r].append((a.stage, a.mb))
        else:
            pending_w[r].popleft()
            live[r] -= 1
    return out


def _dual(p: int, m: int, r: int, bidirectional: bool) -> list[Action]:
    """The eight phases of DualPipe / DualPipeV on rank r (deepseek-ai/DualPipe, ``dualpipe.py``
    and ``dualpipev.py``), as abstract chunk actions turned into stage/micro-batch actions."""
    if bidirectional:
        half, h = p // 2, min(r, p - 1 - r)
        per_dir = m // 2
        second = r >= half
        # chunk 0 is the direction in which this rank sits early (stage h of it)
        dirs = (1, 0) if second else (0, 1)
        stage_of_dir = {0: r, 1: 2 * p - 1 - r}
        stage = {c: stage_of_dir[dirs[c]] for c in (0, 1)}
        first_mb = {c: dirs[c] * per_dir for c in (0, 1)}
        special = r in (half - 1, half)  # the middle ranks pass chunk 0's output to themselves
        n_half, idx, n_chunks = half, h, per_dir
        s4 = n_chunks - p + idx + 1
    else:
        stage = {0: r, 1: 2 * p - 1 - r}
        first_mb = {0: 0, 1: 0}
        special = r == p - 1
        n_half, idx, n_chunks = p, r, m
        s4 = n_chunks - 2 * p + idx + 1
    nf = {0: 0, 1: 0}
    nb = {0: 0, 1: 0}
    wq: deque[Action] = deque()
    out: list[Action] = []

    def f(c: int) -> Action:
        a = Action(stage[c], "F", first_mb[c] + nf[c])
        nf[c] += 1
        return a

    def b(c: int, zb: bool = False) -> list[Action]:
        mb = first_mb[c] + nb[c]
        nb[c] += 1
        if zb:
            wq.append(Action(stage[c], "W", mb))
            return [Action(stage[c], "I", mb)]
        return [Action(stage[c], "B", mb)]

    def w() -> list[Action]:
        return [wq.popleft()]

    for _ in range((n_half - idx - 1) * 2):  # 1: nF0
        out.append(f(0))
    for _ in range(idx + 1):  # 2: nF0F1
        out += [f(0), f(1)]
    for _ in range(n_half - idx - 1):  # 3: nB1W1F1 (zero bubble)
        out += b(1, True) + w() + [f(1)]
    for i in range(s4):  # 4: nF0B1F1B0 (overlapped pairs)
        if i == 0 and special:
            out += [f(0)] + b(1)
        else:
            fa = f(0)
            out.append(overlap(fa, b(1)[0]))
        fa = f(1)
        out.append(overlap(fa, b(0)[0]))
    for _ in range(n_half - idx - 1):  # 5: nB1F1B0
        out += b(1)
        fa = f(1)
        out.append(overlap(fa, b(0)[0]))
    zb = False
    s6 = idx + 1
    for i in range(s6):  # 6: nB1B0, second half zero bubble
        if i == s6 // 2 and idx % 2 == 1:
            zb = True
        out += b(1, zb)
        if i == s6 // 2 and idx % 2 == 0:
            zb = True
        out += b(0, zb)
    for _ in range(n_half - idx - 1):  # 7: nWB0
        out += w() + b(0, True)
    for _ in range(idx + 1):  # 8: nW
        out += w()
    return out


def generate(
    name: str,
    pp: int,
    m: int,
    vpp: int = 1,
    cost: Callable[[int, str], float] | None = None,
) -> dict[int, list[Action]]:
    """The per-rank orders of schedule ``name`` for ``pp`` ranks and ``m`` micro-batches.

    ``cost(stage, kind)`` (seconds of F, I, W of a stage) steers the greedy zero-bubble orders;
    unit costs (F = I = W) when absent."""
    if name not in NAMES:
        raise HwtuneInputError("schedule.name", name, "one of " + ", ".join(NAMES) + " or actions")
    c = cost or (lambda s, k: 1.0)
    if name == "gpipe":
        return {r: _gpipe(pp, m, r) for r in range(pp)}
    if name == "1f1b":
        return {r: _one_f_one_b(pp, m, r) for r in range(pp)}
    if name == "interleaved":
        if m % pp:
            raise HwtuneInputError(
                "micro-batches", m, f"a multiple of pp={pp} for interleaved 1F1B"
            )
        return {r: _interleaved(pp, m, vpp, r) for r in range(pp)}
    if name == "zb-h1":
        return {r: _zb_h1(pp, m, r) for r in range(pp)}
    if name == "zbv":
        return _greedy_zero_bubble(pp, m, [[r, 2 * pp - 1 - r] for r in range(pp)], c, limit=2 * pp)
    if name == "dualpipe":
        if pp % 2 or m % 2 or m < 2 * pp:
            raise HwtuneInputError(
                "schedule", f"dualpipe pp={pp} m={m}", "an even pp and an even m >= 2*pp"
            )
        return {r: _dual(pp, m, r, True) for r in range(pp)}
    if m < 2 * pp:
        raise HwtuneInputError(
            "schedule", f"dualpipev pp={pp} m={m}", "at least 2*pp micro-batches"
        )
    return {r: _dual(pp, m, r, False) for r in range(pp)}
