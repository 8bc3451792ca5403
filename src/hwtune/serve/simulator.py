"""The discrete-event loop: arrivals, engine steps, KV hand-offs, over one or more replicas.

Events live in one heap ordered by (time, sequence number), so ties resolve in insertion order and
a run is deterministic. A replica launches a step whenever it is idle (or, with pipeline
parallelism, when its first stage frees up: up to ``pp`` batches are in flight, vLLM's virtual
engines) and has work; the step's duration comes from the `IterationModel`.

Disaggregated prefill/decode (Zhong et al. OSDI'24 "DistServe"; Patel et al. ISCA'24 "Splitwise"):
prefill replicas run prompts only; when a prompt's last chunk finishes, the request is handed to a
decode replica's queue while its KV cache stays on the prefill replica. The decode replica admits
it when a sequence slot and KV blocks are free (`Replica._admit_handoffs`), then pulls the cache
over the scale-out network (each of the prefill replica's GPUs sends its shard in parallel:
α + bytes/β per GPU, `hwtune.cost.collectives.send_recv_time`); the prefill replica frees the
blocks when it lands. The first token reaches the user at the start of the first decode step that
runs the request: TensorRT-LLM's PyExecutor returns the prefill's token from the generation server
(``_handle_first_token_response``, just before that step's forward), and Dynamo's frontend
consumes the prefill worker's output for its ``disaggregated_params`` and streams only the decode
worker's (``lib/llm/src/kv_router/prefill_router.rs``), so TTFT includes the wait for a decode
slot, the transfer and the rest of the decode step in flight.

Front end (`ReplicaConfig.frontend_tokens_per_s`, off by default): an engine streams its tokens
through one API-server process (SGLang's detokenizer and tokenizer manager, vLLM's API server,
trtllm-serve), which handles each step's output after the previous step's. Modelled as one
first-in-first-out server per replica that takes a step's ``n`` sampled tokens in ``n / rate``
seconds: the client sees a token when the front end is through with its step (TTFT, inter-token
gaps, E2E), and a closed-loop client sends its next request only then. When the GPU outruns the
front end, the engine keeps generating and the backlog grows, so a new request's first token
queues behind it (TTFT rises with the backlog, TPOT settles at concurrency / rate). Prefill
workers of a disaggregated deployment stream nothing; the first token a decode worker takes over
is shown at the start of its first decode step, as without a limit.

Host timeline (`ReplicaConfig.host_timeline`, off by default; needs ``overlap_schedule`` and
``pp`` = 1). TensorRT-LLM's ``PyExecutor._executor_loop_overlap`` fetches, schedules and
launches step k+1, then waits for step k and sends its tokens (SGLang's ``event_loop_overlap``
runs the same order). With H_k the instant the host begins step k, L_k = H_k + its launch time
(`IterationModel.launch_time`: the launch floor for an eager prefill step, 0 for a CUDA-graph
replay) and G_k the end of step k on the GPU:

  H_{k+1} = max(L_k, G_{k-1})       (the host has launched step k and processed step k-1)
  G_{k+1} = max(G_k + GPU time, L_{k+1})
  step k's tokens go out at max(G_k, L_{k+1}), and batch k+1 is formed at H_{k+1}.

So an eager step after a decode ends earlier than a whole floor after that decode (its launches
began while the decode ran), and a step followed by an eager step delivers its tokens one launch
later. With cheap launches both reduce to the default (tokens at the step's end, the batch
formed when the step before began). A batch that finds nothing to run at H_{k+1} and takes
requests that arrived since (the engine would otherwise idle) is formed and launched when it
is launched, after step k's tokens went out. A prefill worker of a disaggregated deployment
hands its finished prompts over when it would send their tokens, max(G_k, L_{k+1}).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from hwtune.cost.collectives import send_recv_time
from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.iteration import IterationModel, StepShape
from hwtune.serve.kv_usage import merge_usage, stretch_blocks
from hwtune.serve.memory import ReplicaMemory, replica_memory
from hwtune.serve.request import Request, Workload
from hwtune.serve.scheduler import Replica
from hwtune.serve.speculative import accepted

ARRIVAL, STEP_DONE, TRY, KV_ARRIVE, HANDOFF, CLIENT_FREE = 0, 1, 2, 3, 4, 5


@dataclass
class StepRecord:
    """One engine step, for traces: replica, start, duration, what it ran."""

    replica: int
    role: str
    start: float
    duration: float
    shape: StepShape
    prefills: int
    decodes: int
    kv_used: float


@dataclass
class SimResult:
    """Everything a run produced: finished requests, inter-token gaps, step log, KV samples."""

    requests: list[Request]
    itl: np.ndarray
    itl_weights: np.ndarray
    steps: list[StepRecord]
    kv_time: np.ndarray
    kv_util: np.ndarray
    """The deployment's used fraction of all its KV blocks, from each instant in ``kv_time`` on
    (`hwtune.serve.kv_usage.merge_usage`)."""
    kv_peak: float
    """The largest used fraction of any one replica's KV blocks."""
    prefix_log: np.ndarray
    """Every prefix-cache lookup of all replicas in time order, one row each: the admission's
    time, tokens asked for, tokens found cached (`Replica.prefix_log`)."""
    preemptions: int
    duration_s: float
    wall_s: float
    n_steps: int
    memory: ReplicaMemory
    prefill_memory: ReplicaMemory | None
    deployment: Deployment
    models: dict[str, IterationModel] = field(default_factory=dict)
    replicas_used: int = 0
    """How many of the (decode) pool's replicas a request was routed to: they are always the
    lowest-numbered ones (least-tokens takes the lowest-numbered idle replica; round-robin goes
    in order), so a deployment with one replica more than this routes every request alike."""
    prefill_replicas_used: int = 0
    """The same for a disaggregated deployment's prefill pool (0 when aggregated)."""
    closed_loop: bool = False
    """The workload was a closed loop (`hwtune.serve.request.Workload.mode`), which cannot
    outrun the deployment (`hwtune.serve.backlog`)."""

    @property
    def prefix_query_tokens(self) -> int:
        return int(self.prefix_log[:, 1].sum())

    @property
    def prefix_hit_tokens(self) -> int:
        return int(self.prefix_log[:, 2].sum())


_MODEL_CACHE: dict[ReplicaConfig, IterationModel] = {}


def iteration_model(cfg: ReplicaConfig) -> IterationModel:
    """One `IterationModel` per configuration, kept for the process (its grid is reusable)."""
    m = _MODEL_CACHE.get(cfg)
    if m is None:
        if len(_MODEL_CACHE) > 256:
            _MODEL_CACHE.clear()
        m = _MODEL_CACHE[cfg] = IterationModel(cfg)
    return m


def check_request_limits(reqs: list[Request], cfg: ReplicaConfig) -> None:
    """Refuse what replica ``cfg`` refuses whatever its layout: a request past the model's
    learned position table or the replica's context limit (`ReplicaConfig.context_limit`), and
    a prompt longer than one step's budget under a policy that prefills prompts whole
    (`_check_whole_prompts`). `hwtune.serve.plan` checks these once before its search (its
    layouts share the budget, the scheduler and the limit)."""
    _check_context(reqs, cfg)
    _check_whole_prompts(reqs, cfg, "replica")


def _check_context(reqs: list[Request], cfg: ReplicaConfig) -> None:
    """Refuse a request past the model's learned position table or ``cfg.context_limit``."""
    table = cfg.model.max_position  # a learned position table has no row past its end
    context = cfg.context_limit
    if cfg.max_model_len:
        why = "the replica's --max-model-len, past which engines refuse a request"
    else:
        why = (
            f"{cfg.model.name}'s context length (its config.json max_position_embeddings and "
            "RoPE scaling, from which engines set max_model_len and refuse longer requests)"
        )
    for r in reqs:
        if table and r.prompt + r.output > table:
            raise HwtuneInputError(
                r.named("input-len + output-len"), r.prompt + r.output,
                f"at most {table} tokens, the rows of {cfg.model.name}'s learned position "
                f"table{r.tail()}",
            )  # fmt: skip
        if context and r.prompt + r.output > context:
            raise HwtuneInputError(
                r.named("input-len + output-len"), r.prompt + r.output,
                f"at most {context} tokens, {why}{r.tail()}",
            )  # fmt: skip


def _check_lengths(
    reqs: list[Request], cfg: ReplicaConfig, mem: ReplicaMemory, what: str,
    prompt_only: bool = False,
) -> None:  # fmt: skip
    """Refuse a request that the cache could never hold alone. ``prompt_only``: a prefill
    replica of a disaggregated deployment, which holds a prompt's KV and never decodes (unless
    it reserves blocks to completion, `ReplicaConfig.reserve_to_completion`)."""
    cap = mem.kv_tokens * cfg.dp_attention
    drafts = 0 if prompt_only else cfg.decode_queries - 1  # a verification step's drafts' KV
    field = "input-len" if prompt_only else "input-len + output-len"
    field += " + spec-tokens" if drafts else ""
    for r in reqs:
        need = r.prompt if prompt_only else r.prompt + r.output + drafts
        if need > cap:
            raise HwtuneInputError(
                r.named(field), need,
                f"at most {cap} tokens, the {what} KV cache of {mem.kv_blocks} blocks of "
                f"{cfg.block_size} tokens{r.tail()}",
            )  # fmt: skip


WHOLE_PROMPT_POLICIES: tuple[str, ...] = ("orca", "prefill-first")
"""Scheduler policies that prefill a prompt whole in one step, within the token budget."""


def _check_whole_prompts(reqs: list[Request], cfg: ReplicaConfig, what: str) -> None:
    """Refuse a prompt longer than one step's token budget under a policy that prefills prompts
    whole (`WHOLE_PROMPT_POLICIES`): no engine runs one. TensorRT-LLM's PyTorch backend without
    chunked prefill rejects the request ("The sum of prompt length (P), query length (Q) should
    not exceed max_num_tokens (M)", ``tensorrt_llm/llmapi/llm.py`` ``_check_arguments``, an HTTP
    400 from ``trtllm-serve``); vLLM without chunked prefill refuses to start with
    ``max_num_batched_tokens`` below ``max_model_len`` (``SchedulerConfig`` verification: it
    "makes vLLM reject longer sequences"). The whole prompt counts, cached prefix or not."""
    if cfg.scheduler not in WHOLE_PROMPT_POLICIES:
        return
    budget = cfg.token_budget()
    for r in reqs:
        if r.prompt > budget:
            raise HwtuneInputError(
                r.named("input-len"), r.prompt,
                f"at most {budget} tokens, the {what}'s max-num-batched-tokens: scheduler "
                f"{cfg.scheduler} prefills a prompt whole in one step{r.tail()}; raise "
                "the budget or use a chunking scheduler (vllm, sarathi, sglang)",
            )  # fmt: skip


def _merged_prefix_log(reps: list[Replica]) -> np.ndarray:
    rows = [e for x in reps for e in x.prefix_log]
    log = np.array(rows, dtype=float).reshape(-1, 3)
    return log[np.argsort(log[:, 0], kind="stable")]


def simulate(
    deployment: Deployment | ReplicaConfig,
    workload: Workload,
    record_steps: bool = False,
    max_sim_time: float | None = None,
    fast: bool = True,
    record_tokens: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Run ``workload`` on ``deployment`` until every request has finished.

    ``fast`` batches the bookkeeping of decode-only stretches (see ``fast_forward``); the
    results are the same as step by step (a test checks it). ``record_tokens`` keeps every
    request's token times (`Request.token_times`; aggregated deployments only). ``progress``
    is told (requests finished, requests) about every 1% of the requests and when the last one
    finishes (a run cut short by ``max_sim_time`` stops short of that)."""
    t_wall = time.perf_counter()
    dep = deployment if isinstance(deployment, Deployment) else Deployment(deployment)
    cfg = dep.replica
    mem = replica_memory(cfg)
    model = iteration_model(cfg)
    disagg = dep.prefill is not None
    decode_role = "decode" if disagg else "both"
    reps = [Replica(i, cfg, model, mem.kv_blocks * cfg.dp_attention, decode_role)
            for i in range(dep.replicas)]  # fmt: skip
    pmem = None
    pmodel = None
    preps: list[Replica] = []
    transfer_per_token = 0.0
    pcl = None
    if disagg:
        pcfg = dep.prefill
        assert pcfg is not None
        pmem = replica_memory(pcfg)
        pmodel = iteration_model(pcfg)
        preps = [Replica(dep.replicas + i, pcfg, pmodel, pmem.kv_blocks * pcfg.dp_attention,
                         "prefill") for i in range(dep.prefill_replicas)]  # fmt: skip
        transfer_per_token = pmem.kv_bytes_per_token
        pcl = pmodel.cluster
    reqs = workload.make_requests()
    if record_tokens:
        if disagg:
            raise HwtuneInputError("record_tokens", True, "an aggregated deployment")
        for r in reqs:
            r.token_times = []
    _check_context(reqs, cfg)
    _check_lengths(reqs, cfg, mem, "decode" if disagg else "replica")
    if disagg:
        assert pcfg is not None and pmem is not None
        _check_lengths(reqs, pcfg, pmem, "prefill", not pcfg.reserve_to_completion)
        _check_whole_prompts(reqs, pcfg, "prefill pool")
    else:
        _check_whole_prompts(reqs, cfg, "replica")
    entry = preps if disagg else reps

    heap: list[tuple[float, int, int, object, object]] = []
    seq = 0

    def push(t: float, kind: int, a: object, b: object = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, a, b))

    closed = workload.mode == "closed"
    next_idx = 0
    n_done = 0
    report_every = max(1, -(-len(reqs) // 100))
    if closed:
        for r in reqs[: workload.concurrency]:
            push(0.0, ARRIVAL, r)
        next_idx = min(workload.concurrency, len(reqs))
    else:
        for r in reqs:
            push(r.arrival, ARRIVAL, r)

    rr = [0, 0]
    itl: list[float] = []
    itl_w: list[int] = []
    steps: list[StepRecord] = []
    n_steps = 0

    used = [0, 0]  # replicas of the entry and decode pools routed to (lowest indices first)

    def route(pool: list[Replica], which: int) -> Replica:
        if dep.router == "least-tokens" and len(pool) > 1:
            rep = min(pool, key=lambda x: (x.outstanding, x.idx))
        else:
            rep = pool[rr[which] % len(pool)]
            rr[which] += 1
        used[which] = max(used[which], rep.idx - pool[0].idx + 1)
        return rep

    def launch(rep: Replica, t: float, prev_start: float = float("inf")) -> None:
        """Start the replica's next step at ``t`` if it is free and has work. ``prev_start``:
        when the step that just ended began (an overlap scheduler formed this batch then)."""
        nonlocal n_steps
        if rep.inflight >= rep.cfg.pp or rep.stage_free > t:
            return
        if fast and rep.running and fast_forward(rep, t):
            rep.host_end = t
            return
        host_start = t
        cutoff = prev_start if rep.cfg.overlap_schedule and rep.cfg.pp == 1 else math.inf
        if prev_start != math.inf and rep.cfg.host_timeline:
            # the host launched the step that just ended, then waited for the one before
            host_start = cutoff = max(rep.host_end, prev_start)
        batch, shape = rep.schedule(t, cutoff)
        rep.note_kv(t)
        if rep.receiving:
            for r in rep.receiving:  # admitted hand-offs pull their KV from the prefill replica
                nbytes = r.computed * transfer_per_token
                dt = send_recv_time(nbytes, True, pcl) if pcl is not None else 0.0
                push(t + dt, KV_ARRIVE, rep, r)
            rep.receiving.clear()
        if not batch:
            return
        rep.fell_back = host_start < t and any(r.queued > cutoff for r, _q in batch)
        if rep.fell_back:
            # nothing was schedulable at the cutoff: the host sent the last step's tokens and
            # formed this batch from requests that arrived since, at ``t``
            host_start = t
        if rep.role == "decode":
            for r, _q in batch:
                if r.first_token != r.first_token:  # the prefill's token, sent before this step
                    r.first_token = r.last_token = t
        dur = rep.model.step_time(shape, t - host_start)
        rep.host_end = host_start + rep.model.launch_time(shape)
        rep.last_duration = dur
        rep.last_start = t
        for r, _q in batch:
            r.busy = True
        rep.inflight += 1
        rep.stage_free = t + dur / rep.cfg.pp
        n_steps += 1
        push(t + dur, STEP_DONE, rep, batch)
        if rep.cfg.pp > 1:
            push(rep.stage_free, TRY, rep)
        if record_steps:
            used = rep.blocks.used_blocks / max(1, rep.blocks.num_blocks)
            pf = sum(1 for r, _q in batch if r.computed < r.target)
            steps.append(StepRecord(rep.idx, rep.role, t, dur, shape, pf, len(batch) - pf, used))

    def fast_forward(rep: Replica, t: float) -> bool:
        """Run a stretch of identical-membership decode steps in one event: every running
        request decodes, nothing can join (no admissible waiting request) and nothing finishes
        or arrives before the stretch ends. Step times are still computed one by one; only the
        per-request bookkeeping is batched, so results equal step-by-step simulation."""
        nonlocal n_steps
        cfg_r = rep.cfg
        run = rep.running
        n = len(run)
        if cfg_r.pp > 1 or rep.role == "prefill" or n > rep.budget or cfg_r.spec_tokens:
            return False
        if rep.held:  # slots and blocks of just-finished requests free up after this step
            return False
        if rep.waiting and (cfg_r.adp_balance_timeout_iters > 0
                            or cfg_r.batch_wait_timeout_iters > 0
                            or cfg_r.batch_wait_max_tokens_ratio > 0):  # fmt: skip
            return False  # their hold counters advance every step the queue is looked at
        if rep.waiting and rep.role == "decode" and n < cfg_r.max_num_seqs:
            return False  # a hand-off joins on a free slot and blocks, whatever the policy
        if rep.waiting and rep.policy != "static" and n < cfg_r.max_num_seqs:
            # the head of the queue may still be blocked for the whole stretch: free blocks only
            # shrink while decodes grow, so a head that does not fit now will not fit later
            head = rep.waiting[0]
            # these two run prompts in a step of their own, with the whole token budget
            room = rep.budget if rep.policy in ("prefill-first", "sglang") else rep.budget - n
            if room <= 0:
                pass
            elif rep.blocks.enable_prefix or head.blocks:
                return False
            else:
                first = min(max(1, head.target - head.computed), room, rep.rank_budget)
                if -(-(head.computed + first) // cfg_r.block_size) <= rep.blocks.free_blocks:
                    return False
        horizon = min(heap[0][0] if heap else math.inf, due)
        if horizon - t < 2.0 * rep.last_duration:
            return False  # the next event comes before a second step could start
        kmax = 1 << 62
        for r in run:
            if r.busy or r.computed < r.target or r.first_token != r.first_token:
                return False
            left = r.output - r.generated
            if left < kmax:
                kmax = left
        if kmax < 2:
            return False
        bs = cfg_r.block_size
        c = np.fromiter((r.computed for r in run), dtype=np.int64, count=n)
        have = sum(len(r.blocks) for r in run)
        free = rep.blocks.free_blocks
        lo, hi = 1, kmax
        while lo < hi:  # largest k whose new blocks fit
            mid = (lo + hi + 1) // 2
            if int(((c + mid + bs - 1) // bs).sum()) - have <= free:
                lo = mid
            else:
                hi = mid - 1
        k = lo
        if k < 2:
            return False
        w = rep.window
        ctx0 = float(c.sum()) + n
        durs: list[float] = []
        shapes: list[StepShape] = []
        starts: list[float] = []
        start = last = t
        for i in range(k):
            if i and start >= horizon:
                break
            last = start
            starts.append(start)
            ctx = ctx0 + i * n
            ctx_w = float(np.minimum(c + 1 + i, w).sum()) if w else ctx
            sh = StepShape(tokens=n, seqs=n, sampled=n, dec_n=n, dec_ctx=ctx, dec_ctx_w=ctx_w,
                           draft_rows=n)  # fmt: skip
            d = rep.model.step_time(sh)
            durs.append(d)
            if record_steps:
                shapes.append(sh)
            start += d
        k = len(durs)
        if k < 2:
            return False
        # the blocks each step of the stretch holds, as step-by-step launches would log them
        held = np.fromiter((len(r.blocks) for r in run), dtype=np.int64, count=n)
        used = rep.blocks.used_blocks - have + stretch_blocks(c, held, bs, k)
        for r in run:
            if not rep._grow(r, k):  # cannot fail: checked above
                raise AssertionError("fast-forward block allocation")
            r.busy = True
        rep.inflight += 1
        rep.stage_free = start
        rep.last_start = last
        n_steps += k
        new = np.empty(k, dtype=bool)  # log the steps whose usage differs from the one before
        new[0] = not rep.kv_used or rep.kv_used[-1] != used[0]
        np.not_equal(used[1:], used[:-1], out=new[1:])
        rep.kv_times.extend(np.asarray(starts)[new].tolist())
        rep.kv_used.extend(used[new].tolist())
        if record_steps:
            frac = used / max(1, rep.blocks.num_blocks)
            for st, d, sh, f in zip(starts, durs, shapes, frac.tolist(), strict=True):
                steps.append(StepRecord(rep.idx, rep.role, st, d, sh, 0, n, f))
        push(start, STEP_DONE, rep, (list(run), durs, t))
        return True

    due = math.inf
    """An event not yet in the heap: a closed-loop client's next request, sent once the step
    that just ended has its tokens out (after the next step is launched)."""

    def relaunch(rep: Replica, t: float, pending: list[list[int]], seen: float) -> float:
        """After a step: form the next one. ``pending``: the KV blocks of requests that finished
        in it, held (with their sequence slots) while an overlap scheduler forms that batch,
        since it did so when the step began (TensorRT-LLM's ``_executor_loop_overlap`` frees a
        finished request's resources after scheduling the next batch; vLLM's async scheduling
        and SGLang's overlap loop the same); then freed for the batch after. An engine left idle
        schedules again at once with them. ``seen``: the earliest a client of a request that
        finished in it can have its last token (NaN if none finished): a closed loop's clients
        then send new ones, which a decode stretch must not run past.

        Returns when the step's tokens go out: under an overlap scheduler, after the host has
        launched the next step (its outputs are processed after that launch), so an eager
        prefill step launched next delays them by its launch time."""
        nonlocal due
        rep.held = len(pending)
        if seen == seen and closed and next_idx < len(reqs):
            due = math.nextafter(seen, math.inf)  # no earlier than the successors' arrival
        rep.fell_back = False
        launch(rep, t, rep.last_start)
        emit = max(t, rep.host_end) if rep.cfg.host_timeline and not rep.fell_back else t
        if pending:
            rep.held = 0
            for blocks in pending:
                rep.blocks.release(blocks)
            if not rep.inflight:
                launch(rep, t)
        due = math.inf
        return emit

    def enqueue(r: Request, rep: Replica, t: float) -> None:
        """Queue ``r`` at ``rep`` at ``t`` (an arrival, or a prefill replica's hand-off)."""
        r.replica = rep.idx
        r.queued = t
        rep.outstanding += r.prompt + r.output
        rep.waiting.append(r)
        launch(rep, t)

    def hand_over(handed: list[Request], t: float) -> None:
        """Queue prompts a prefill replica has finished at decode replicas (routed one by one)."""
        for r in handed:
            enqueue(r, route(reps, 1), t)

    def finish(r: Request, rep: Replica, t: float) -> None:
        """``r`` has its last token at its client at ``t`` (which may lie after the event being
        processed: a front end or the host's timeline delivers later). A closed loop's client is
        free then; the next request goes to the client freed first (`CLIENT_FREE`, in time
        order across replicas), not to the step whose event happens to be processed first."""
        nonlocal n_done
        r.finish = t
        rep.outstanding -= r.prompt + r.output
        if closed and next_idx < len(reqs):
            push(t, CLIENT_FREE, None)
        n_done += 1
        if progress is not None and (n_done % report_every == 0 or n_done == len(reqs)):
            progress(n_done, len(reqs))

    def send_next(t: float) -> None:
        """A closed loop's client, free at ``t``, sends the next request."""
        nonlocal next_idx
        if next_idx < len(reqs):
            nxt = reqs[next_idx]
            next_idx += 1
            # sent when the client has its predecessor's last token, so it reaches the engine
            # after the batch formed at that instant (however small the client's turnaround)
            nxt.arrival = math.nextafter(t, math.inf)
            push(nxt.arrival, ARRIVAL, nxt)

    while heap:
        t, _s, kind, a, b = heapq.heappop(heap)
        if max_sim_time is not None and t > max_sim_time:
            break
        if kind == ARRIVAL:
            enqueue(a, route(entry, 0), t)  # type: ignore[arg-type]
        elif kind == STEP_DONE:
            rep = a  # type: ignore[assignment]
            batch = b  # type: ignore[assignment]
            rep.inflight -= 1
            done = False
            if isinstance(batch, tuple):  # a fast-forwarded decode stretch
                run, durs, t0 = batch
                k = len(durs)
                hold = rep.cfg.overlap_schedule and rep.cfg.pp == 1
                pending: list[list[int]] = []
                ended: list[Request] = []
                for r in run:
                    r.busy = False
                    r.computed += k
                    r.target = r.computed
                    r.generated += k
                    if rep.blocks.enable_prefix:
                        rep.register_blocks(r)
                    if r.generated >= r.output:
                        (pending.append if hold else rep.blocks.release)(r.blocks)
                        r.blocks = []
                        done = True
                        ended.append(r)
                if done:
                    rep.running = [r for r in rep.running if r.generated < r.output]
                # step ends summed in the order the stretch summed them (as step by step), so
                # the last one is ``t``; its tokens go out at ``emit``
                ends = list(accumulate(durs, initial=t0))[1:]
                lb = math.nan  # the earliest the clients of finished requests can send again
                if ended:
                    lb = rep.deliver(ends, len(run), take=False)[-1]
                emit = relaunch(rep, t, pending, lb)
                ends[-1] = emit
                if rep.frontend_s_per_token:
                    seen = rep.deliver(ends, len(run))
                    gaps = list(np.diff(seen))
                else:
                    seen = [t0 + durs[0], emit]
                    gaps = durs[1:]
                    gaps[-1] += emit - t
                if k > 1:
                    itl.extend(gaps)
                    itl_w.extend([len(run)] * (k - 1))
                first_end, t_seen = seen[0], seen[-1]
                times = None
                if record_tokens:
                    times = seen if rep.frontend_s_per_token else ends
                for r in run:
                    if times is not None and r.token_times is not None:
                        r.token_times.extend(times)
                    itl.append(first_end - r.last_token)
                    itl_w.append(1)
                    r.last_token = t_seen
                for r in ended:
                    finish(r, rep, t_seen)
                rep.note_kv(t)
                continue
            prefix_on = rep.blocks.enable_prefix
            bs = rep.cfg.block_size
            spec = rep.cfg.spec_tokens > 0
            per_step = rep.cfg.tokens_per_step if spec else 1.0
            hold = rep.cfg.overlap_schedule and rep.cfg.pp == 1
            pending = []
            rows = -1
            if rep.frontend_s_per_token and rep.role != "prefill":
                rows = sum(1 for r, q in batch if r.computed + q >= r.target)  # type: ignore[union-attr]
            out: list[tuple[Request, int]] = []  # requests with tokens from this step
            handed: list[Request] = []  # prompts a prefill replica finished in this step
            for r, q in batch:  # type: ignore[union-attr]
                r.busy = False
                gain = 1
                if spec and r.computed >= r.target:  # a verification step: keep what is accepted
                    gain, r.spec_credit = accepted(r.spec_credit, per_step, r.output - r.generated)
                    q = gain
                r.computed += q
                if prefix_on and r.computed // bs > r.hashed:
                    rep.register_blocks(r)
                if r.computed < r.target:
                    continue
                r.target = r.computed
                r.generated += gain
                if rep.role == "prefill":
                    # to a decode replica's queue; the KV stays here until that replica admits it
                    rep.running.remove(r)
                    r.handoff = (rep, r.blocks)
                    r.blocks = []
                    r.hashed = 0
                    r.last_hash = 0
                    handed.append(r)
                    continue
                if r.generated == 1:
                    r.first_token = t  # until the token goes out (below)
                out.append((r, gain))
                if r.generated >= r.output:
                    (pending.append if hold else rep.blocks.release)(r.blocks)
                    r.blocks = []
                    done = True
            if done:
                rep.running = [r for r in rep.running if r.generated < r.output]
            if handed and not rep.cfg.host_timeline:
                hand_over(handed, t)
            lb = math.nan
            if done:
                lb = t if rows < 0 else rep.deliver([t], round(rows * per_step), take=False)[0]
            emit = relaunch(rep, t, pending, lb)
            if handed and rep.cfg.host_timeline:  # once the host has launched the next step
                push(emit, HANDOFF, rep, handed)
            # when the client sees this step's tokens (after the front end)
            t_seen = emit if rows < 0 else rep.deliver([emit], round(rows * per_step))[0]
            for r, gain in out:
                if r.generated == 1:
                    r.first_token = t_seen
                else:
                    itl.append(t_seen - r.last_token)
                    itl_w.append(1)
                    if gain > 1:  # accepted drafts arrive with it
                        itl.extend([0.0] * (gain - 1))
                        itl_w.extend([1] * (gain - 1))
                r.last_token = t_seen
                if r.token_times is not None:
                    r.token_times.extend([t_seen] * gain)
                if r.generated >= r.output:
                    finish(r, rep, t_seen)
            rep.note_kv(t)
        elif kind == CLIENT_FREE:
            send_next(t)
        elif kind == TRY:
            launch(a, t)  # type: ignore[arg-type]
        elif kind == HANDOFF:
            hand_over(b, t)  # type: ignore[arg-type]
        else:  # KV_ARRIVE: the cache of an admitted hand-off has landed on its decode replica
            dst = a  # type: ignore[assignment]
            r = b  # type: ignore[assignment]
            src, src_blocks = r.handoff  # type: ignore[misc]
            r.handoff = None
            src.blocks.release(src_blocks)
            src.outstanding -= r.prompt + r.output
            r.busy = False
            r.target = r.computed = r.prompt + r.generated - 1
            if r.generated >= r.output:  # one-token request: the prefill's token was all
                r.first_token = r.last_token = t
                dst.blocks.release(r.blocks)
                r.blocks = []
                dst.running.remove(r)
                finish(r, dst, t)
            launch(dst, t)
            launch(src, t)
            dst.note_kv(t)
            src.note_kv(t)

    unfinished = [r for r in reqs if r.finish != r.finish]
    if unfinished and max_sim_time is None:
        r = unfinished[0]
        raise HwtuneInputError(
            "workload", f"request {r.rid} (prompt {r.prompt}, output {r.output})",
            "requests that the replica can run to completion (check max_num_seqs, "
            "max_num_batched_tokens and the KV cache size)",
        )  # fmt: skip
    done_reqs = [r for r in reqs if r.finish == r.finish]
    end = max((r.finish for r in done_reqs), default=0.0)
    allreps = reps + preps
    kv_time, kv_util, kv_peak = merge_usage(
        [(x.kv_times, x.kv_used, x.blocks.num_blocks) for x in allreps]
    )
    return SimResult(
        requests=done_reqs,
        itl=np.asarray(itl, dtype=float),
        itl_weights=np.asarray(itl_w, dtype=float),
        steps=steps,
        kv_time=kv_time,
        kv_util=kv_util,
        kv_peak=kv_peak,
        prefix_log=_merged_prefix_log(allreps),
        preemptions=sum(x.preemptions for x in allreps),
        duration_s=end,
        wall_s=time.perf_counter() - t_wall,
        n_steps=n_steps,
        memory=mem,
        prefill_memory=pmem,
        deployment=dep,
        models={"prefill": pmodel, "decode": model} if disagg else {"both": model},
        replicas_used=used[1] if disagg else used[0],
        prefill_replicas_used=used[0] if disagg else 0,
        closed_loop=workload.mode == "closed",
    )
