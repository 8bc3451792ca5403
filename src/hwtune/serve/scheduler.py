"""Batch formation of one replica per engine step: the scheduling policies.

- ``vllm``: vLLM V1's unified scheduler (vLLM docs, "Optimization and Tuning: chunked prefill";
  ``vllm/v1/core/sched/scheduler.py``): running requests first, in admission order, each taking
  one decode token or a chunk of its remaining prompt from the ``max_num_batched_tokens`` budget;
  then waiting requests FCFS while budget and ``max_num_seqs`` allow, the last prompt chunked.
- ``sarathi``: Sarathi-Serve stall-free batching (Agrawal et al. OSDI'24, §4.3, Algorithm 2):
  all ongoing decodes first, then the partial prefills, then new prompts, chunked to a small
  token budget (``chunk_size``) so that decodes never stall behind a long prompt.
- ``orca``: Orca iteration-level scheduling with selective batching (Yu et al. OSDI'22, §4):
  new requests join the running batch every iteration, but each prompt is prefilled whole in
  one iteration (no chunking), within the token budget.
- ``prefill-first``: vLLM's pre-V1 default (Kwon et al. SOSP'23, §4.5): an iteration is either
  all prompts (when any waiting prompt fits) or all decodes.
- ``sglang``: SGLang's default scheduler (v0.5, ``Scheduler.get_next_batch_to_run``: "Run
  prefill first if possible"; ``enable_mixed_chunk`` off): a step is either prompt chunks only
  (a chunked prompt in progress first, then waiting prompts FCFS, chunked, within the token
  budget) or decodes only; decodes wait while prompts are prefilled.
- ``static``: request-level batching (FasterTransformer-style baseline; Orca §2.2): a batch of up
  to ``max_num_seqs`` requests is formed when the replica is idle and runs until its last
  request finishes; nothing joins in between. It has no token budget: the batch's prompts
  run whole in one step whatever ``max_num_batched_tokens`` says (a static batch is bounded by
  requests, not tokens), where the whole-prompt iteration policies refuse a prompt over it.
  The replica's memory (`memory.activation_bytes_per_gpu`) reserves one budget's activations, so
  a static step longer than the budget is not charged the activations beyond it (stated in the
  README: the baseline's KV capacity is optimistic for many long prompts).

With ``ReplicaConfig.adp_balance_timeout_iters`` (TensorRT-LLM attention-DP balancing,
``PyExecutor._balance_adp_requests``): while at least one decoding request per attention-DP rank
is running, new prompts are held until there are as many as ranks (one each) or the timeout in
steps has passed; the ranks' own queues are approximated by the replica's one queue.

With ``ReplicaConfig.batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio`` (TensorRT-LLM
batch waiting, ``PyExecutor._waiting_requests``, applied in ``_schedule`` only without attention
DP and only to a step that has both prompts and decodes): the step runs its decodes alone while
the prompt tokens it would take plus its decode tokens stay below ratio x the token budget, at
most ``timeout_iters`` steps in a row; one counter for the replica, reset when the prompts go.

With ``ReplicaConfig.overlap_schedule`` (TensorRT-LLM's overlap scheduler, ``PyExecutor.
_executor_loop_overlap``: batch k+1 is scheduled and launched before step k's outputs are
processed; SGLang's ``event_loop_overlap``; vLLM's ``--async-scheduling``): the host forms a
step's batch while the previous step runs, so the waiting requests it can take are those queued
before that previous step started (``cutoff``); when nothing else would run, the engine's loop
takes the newer ones at once.

With speculative decoding (``ReplicaConfig.spec_tokens`` k > 0) a decoding sequence takes
k + 1 tokens of the step's budget and KV room for k + 1 entries (its last token and the drafts
to verify); the tokens it keeps are decided when the step ends (`hwtune.serve.speculative`).

All policies are FCFS and preempt by recompute when the KV cache is full (vLLM
``PreemptionMode.RECOMPUTE``): the most recently admitted running request loses its blocks and
returns to the head of the queue, to be prefilled again over its prompt and generated tokens.
"""

from __future__ import annotations

import math
from collections import deque

from hwtune.serve.block_manager import BlockManager
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel, StepShape
from hwtune.serve.request import Request

Batch = list[tuple[Request, int]]


def block_key(r: Request, j: int, block_size: int) -> tuple[int, int, int]:
    """Content identity of block ``j`` of ``r``: the shared prefix of its group (when the block
    lies wholly inside it), or its own tokens. Integers only, so ``hash`` is the same in every
    process (string hashing is salted per process)."""
    if r.prefix_group >= 0 and (j + 1) * block_size <= r.prefix_len:
        return (0, r.prefix_group, j)
    return (1, r.rid, j)


class Replica:
    """One engine: its queue, running batch, paged KV cache and step-time model."""

    def __init__(
        self, idx: int, cfg: ReplicaConfig, model: IterationModel, kv_blocks: int,
        role: str = "both",
    ) -> None:  # fmt: skip
        self.idx = idx
        self.cfg = cfg
        self.model = model
        self.role = role
        self.blocks = BlockManager(kv_blocks, cfg.block_size, cfg.enable_prefix_caching)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.inflight = 0
        self.stage_free = 0.0
        self.outstanding = 0
        self.window = model.window
        self.rank_budget = cfg.token_budget()
        """Tokens one attention-DP rank may process in a step: the engines apply their token
        budget per rank (TensorRT-LLM's ``max_num_tokens`` under attention DP, SGLang's
        per-DP-worker ``chunked_prefill_size``, vLLM's ``max_num_batched_tokens`` per
        data-parallel engine), so a chunk holds at most this many."""
        self.budget = self.rank_budget * cfg.dp_attention
        self.policy = cfg.scheduler
        self.preemptions = 0
        self.last_duration = 0.0
        self.last_start = 0.0
        """When the last step launched began (the instant an overlap scheduler formed the next
        batch, `hwtune.serve.simulator`)."""
        self.host_end = 0.0
        """When the host finished launching the last step (its start plus
        `IterationModel.launch_time`; host timeline of an overlap scheduler,
        `hwtune.serve.simulator`)."""
        self.fell_back = False
        """Whether the last step launched took requests that arrived after its batch was due to
        be formed (nothing else could run), so the host formed and launched it only then."""
        self.receiving: list[Request] = []
        self.kv_times: list[float] = []
        self.kv_used: list[int] = []
        """Used KV blocks whenever they change, and when (`hwtune.serve.kv_usage`)."""
        self.prefix_log: list[tuple[float, int, int]] = []
        """One prefix-cache lookup per admission with prefix caching on: when, the tokens the
        request asked for, and those found cached (`hwtune.serve.metrics.over_time`)."""
        self.held = 0
        """Sequence slots still held by requests that finished in the step that just ended, while
        an overlap scheduler forms the next batch (it was formed when that step began, so their
        slots and KV blocks free up only for the batch after; `hwtune.serve.simulator`)."""
        self.adp_wait = 0
        self.batch_wait = 0
        self.cutoff = math.inf
        """Waiting requests queued after this time are not yet seen by the scheduler (overlap
        scheduling; `math.inf`: all are)."""
        self.frontend_free = 0.0
        fe = cfg.frontend_tokens_per_s
        self.frontend_s_per_token = 1.0 / fe if fe else 0.0

    def deliver(self, ends: list[float], tokens: int, take: bool = True) -> list[float]:
        """When the client sees the tokens of steps that ended at ``ends`` (``tokens`` each):
        the front end takes each step's tokens after the previous step's, first in, first out,
        at `ReplicaConfig.frontend_tokens_per_s` (at once without a limit). ``take`` False:
        only say when, leaving the front end as it was."""
        if not self.frontend_s_per_token:
            return list(ends)
        cost = tokens * self.frontend_s_per_token
        out = []
        free = self.frontend_free
        for e in ends:
            free = (free if free > e else e) + cost
            out.append(free)
        if take:
            self.frontend_free = free
        return out

    # --- helpers ----------------------------------------------------------------------------
    def _reserve(self, r: Request, q: int) -> int:
        """Tokens to allocate blocks for when admitting ``r`` with ``q`` tokens this step: ``q``,
        or every token it will hold by its end under `ReplicaConfig.reserve_to_completion`."""
        if self.cfg.reserve_to_completion:
            return max(q, r.prompt + r.output - r.computed)
        return q

    def note_kv(self, t: float) -> None:
        """Log the used KV blocks at ``t`` if they changed since the last entry."""
        used = self.blocks.used_blocks
        if not self.kv_used or self.kv_used[-1] != used:
            self.kv_times.append(t)
            self.kv_used.append(used)

    def _grow(self, r: Request, q: int) -> bool:
        need = -(-(r.computed + q) // self.cfg.block_size) - len(r.blocks)
        if need <= 0:
            return True
        got = self.blocks.allocate(need)
        if got is None:
            return False
        r.blocks.extend(got)
        return True

    def _preempt(self, victim: Request) -> None:
        self.blocks.release(victim.blocks)
        victim.blocks = []
        victim.computed = 0
        victim.hashed = 0
        victim.last_hash = 0
        victim.target = victim.prompt + victim.generated
        victim.preemptions += 1
        self.preemptions += 1
        self.running.remove(victim)
        self.waiting.appendleft(victim)

    def _victim(self, batch: Batch = ()) -> Request | None:
        """The most recently admitted running request that is neither in flight nor already
        taken into the step being formed (``batch``): vLLM preempts from the tail of its
        running list, which holds only requests not yet scheduled this step. Sarathi's order
        (decodes before partial prefills) takes some from the tail first; preempting one of
        those would run it in the step after it lost its cache."""
        taken = {id(r) for r, _q in batch} if batch else ()
        for r in reversed(self.running):
            if not r.busy and id(r) not in taken:
                return r
        return None

    def _prefix_lookup(self, r: Request) -> None:
        bm = self.blocks
        if not bm.enable_prefix or r.computed or r.blocks:
            return
        bs = self.cfg.block_size
        n = (r.target - 1) // bs
        if n <= 0:
            return
        hashes = []
        h = 0
        for j in range(n):
            h = hash((h, block_key(r, j, bs)))
            hashes.append(h)
            if j == 0 and hashes[0] not in bm._table:
                return
        hits = bm.lookup(hashes)
        if hits:
            r.blocks = hits
            r.hashed = len(hits)
            r.computed = len(hits) * bs
            r.last_hash = hashes[len(hits) - 1]

    def _unlookup(self, r: Request) -> None:
        """A waiting request that cannot start gives back the cached blocks it found, so
        waiting requests never hold KV memory (vLLM frees them the same way), and leave them
        where they were in the LRU order (`BlockManager.unlookup`)."""
        if r.blocks:
            self.blocks.unlookup(r.blocks)
            r.blocks = []
            r.computed = r.hashed = 0
            r.last_hash = 0

    def register_blocks(self, r: Request) -> None:
        """Hash the blocks of ``r`` that became full (prefix caching)."""
        bs = self.cfg.block_size
        full = r.computed // bs
        if full <= r.hashed or not self.blocks.enable_prefix:
            return
        h = r.last_hash
        for j in range(r.hashed, full):
            h = hash((h, block_key(r, j, bs)))
            self.blocks.register(r.blocks[j], h)
        r.hashed = full
        r.last_hash = h

    def _take(self, r: Request, q: int, s: StepShape) -> None:
        c = r.computed
        w = self.window
        s.tokens += q
        s.seqs += 1
        if c < r.target:
            s.pf_tokens += q
            pairs = q * (c + q / 2.0)
            s.pf_pairs += pairs
            s.pf_kv += c + q
            pairs_w, kv_w = (q * min(c + q / 2.0, w), min(c, w) + q) if w else (pairs, c + q)
            s.pf_pairs_w += pairs_w
            s.pf_kv_w += kv_w
            if q > s.pf_max_q:  # the largest chunk: one attention-DP rank runs it whole
                s.pf_max_q, s.pf_max_pairs, s.pf_max_kv = q, pairs, c + q
                s.pf_max_pairs_w, s.pf_max_kv_w = pairs_w, kv_w
            if c + q >= r.target:
                s.sampled += 1
                s.draft_rows += 1
        else:  # a decode: its last token and any drafts to verify (q rows)
            ctx = c + q
            s.dec_n += 1
            s.dec_ctx += ctx
            s.dec_ctx_w += min(ctx, w) if w else ctx
            s.sampled += q
            s.draft_rows += 1

    # --- policies ---------------------------------------------------------------------------
    def schedule(self, now: float, cutoff: float = math.inf) -> tuple[Batch, StepShape]:
        """The next step's batch (request, new tokens) and its shape; empty when idle. Waiting
        requests queued after ``cutoff`` are left for a later step (overlap scheduling), unless
        the step would otherwise be empty."""
        self.cutoff = cutoff
        batch, s = self._schedule(now)
        if not batch and cutoff < now and self.waiting:
            self.cutoff = math.inf
            batch, s = self._schedule(now)
        self.cutoff = math.inf
        return batch, s

    def _seen(self, r: Request) -> bool:
        return r.queued <= self.cutoff

    def _schedule(self, now: float) -> tuple[Batch, StepShape]:
        if self.waiting and self.waiting[0].handoff is not None:
            self._admit_handoffs(now)
        p = self.policy
        if p == "static":
            return self._static(now)
        if p == "prefill-first":
            batch, s = self._admit(now, self.budget, [], StepShape(), chunk=False, first=True)
            if batch:
                return batch, s
            return self._running(self.budget, decode_only=True)
        if p == "sglang":
            batch, s, budget, _ = self._running_full(self.budget, False, True, prefill_only=True)
            batch, s = self._admit(now, budget, batch, s, chunk=True)
            if batch:
                return batch, s
            return self._running(self.budget, decode_only=True)
        order_decodes_first = p == "sarathi"
        chunk = p != "orca"
        batch, s, budget, preempted = self._running_full(self.budget, order_decodes_first, chunk)
        if (
            (not preempted or not batch)
            and not self._adp_hold()
            and not self._batch_wait_hold(batch, budget, chunk)
        ):
            batch, s = self._admit(now, budget, batch, s, chunk=chunk)
        return batch, s

    def _batch_wait_hold(self, batch: Batch, budget: int, chunk: bool) -> bool:
        """Whether TensorRT-LLM's batch waiting holds back the prompts this step would take
        (``PyExecutor._waiting_requests``): only with decodes in the step, without attention DP
        and when some prompt would be scheduled; they go once their tokens (whole prompts, as
        ``len(get_tokens(0))`` counts them) plus the decode tokens reach ``ratio`` x the token
        budget, or after ``timeout_iters`` held steps."""
        cfg = self.cfg
        limit, ratio = cfg.batch_wait_timeout_iters, cfg.batch_wait_max_tokens_ratio
        if (limit <= 0 and ratio <= 0) or cfg.dp_attention > 1 or not self.waiting:
            return False
        gen = sum(q for r, q in batch if r.computed >= r.target)
        if not gen:
            return False
        ctx, room, left = 0, cfg.max_num_seqs - len(self.running) - self.held, budget
        for r in self.waiting:  # what `_admit` would take, without taking it
            if r.handoff is not None or room <= 0 or left <= 0 or not self._seen(r):
                break
            rem = max(1, r.target - r.computed)
            if rem > left and not chunk:
                break
            ctx += r.target
            left -= min(rem, left)
            room -= 1
        if not ctx:
            return False
        if self.batch_wait >= limit or ctx + gen >= ratio * self.budget:
            self.batch_wait = 0
            return False
        self.batch_wait += 1
        return True

    def _adp_hold(self) -> bool:
        """Whether TensorRT-LLM's attention-DP balancing holds the waiting prompts this step: it
        schedules context requests when every rank has one, or when not every rank is decoding,
        or after ``timeout_iters`` held steps (``PyExecutor._balance_adp_requests``, with
        ``batching_wait_iters`` 0)."""
        limit, d = self.cfg.adp_balance_timeout_iters, self.cfg.dp_attention
        if limit <= 0 or d <= 1 or not self.waiting or self.waiting[0].handoff is not None:
            return False
        if not self._seen(self.waiting[0]):
            return False
        new = 0
        for r in self.waiting:
            if not self._seen(r):
                break
            new += r.handoff is None
            if new >= d:
                break
        decoding = sum(1 for r in self.running if r.computed >= r.target)
        if new >= d or decoding < d:
            self.adp_wait = 0
            return False
        self.adp_wait += 1
        if self.adp_wait >= limit:
            self.adp_wait = 0
            return False
        return True

    def _running(self, budget: int, decode_only: bool) -> tuple[Batch, StepShape]:
        batch, s, _, _ = self._running_full(budget, False, True, decode_only)
        return batch, s

    def _running_full(
        self,
        budget: int,
        decodes_first: bool,
        chunk: bool,
        decode_only: bool = False,
        prefill_only: bool = False,
    ) -> tuple[Batch, StepShape, int, bool]:
        s = StepShape()
        batch: Batch = []
        preempted = False
        cands = [r for r in self.running if not r.busy]
        bs = self.cfg.block_size
        dq = self.cfg.decode_queries
        if decodes_first:
            cands.sort(key=lambda r: r.computed < r.target)  # stable: decodes, then prefills
        gone: set[int] = set()
        for r in cands:
            if r.rid in gone:
                continue
            if budget <= 0:
                break
            if r.computed < r.target:
                if decode_only:
                    continue
                rem = r.target - r.computed
                q = min(rem, budget, self.rank_budget)
                if not chunk and q < rem:
                    continue
            else:
                if prefill_only:
                    continue
                q = dq
                if r.computed + q <= len(r.blocks) * bs:  # room in its last block: the common case
                    self._take(r, q, s)
                    batch.append((r, q))
                    budget -= q
                    continue
            while not self._grow(r, q):
                v = self._victim(batch)
                if v is None:
                    break
                if v is r and any(x.busy for x in self.running):
                    # with pp > 1 the others are in flight: wait for them rather than give up
                    # its own cache (preempting itself while they run, two requests that do
                    # not fit together would take turns forever)
                    break
                self._preempt(v)
                gone.add(v.rid)
                preempted = True
                if v is r:
                    break
            if r.rid in gone or not self._fits(r, q):
                continue
            self._take(r, q, s)
            batch.append((r, q))
            budget -= q
        return batch, s, budget, preempted

    def _admit_handoffs(self, now: float) -> None:
        """Disaggregated decode: admit waiting hand-offs FCFS while a sequence slot and KV blocks
        for the prompt and the next token are free; each admitted request then pulls its KV
        cache from the prefill replica (``receiving``, busy until it lands) and runs no step
        before that. TensorRT-LLM's PyExecutor schedules a generation-only request in state
        DISAGG_GENERATION_INIT only when it fits (``fitting_disagg_gen_init_requests``), then
        allocates its blocks and starts the receive (``_prepare_disagg_gen_init``,
        ``request_and_receive_async``); the context server keeps the blocks until the transfer
        completes (``DISAGG_CONTEXT_TRANS_IN_PROGRESS``)."""
        limit = self.cfg.max_num_seqs - self.held
        while self.waiting and len(self.running) < limit:
            r = self.waiting[0]
            if r.handoff is None or not self._seen(r) or not self._grow(r, self._reserve(r, 1)):
                break
            self.waiting.popleft()
            self.running.append(r)
            r.busy = True
            if math.isnan(r.first_scheduled):
                r.first_scheduled = now
            self.receiving.append(r)

    def _prompt_room(self, r: Request) -> bool:
        """Whether the free KV blocks hold all of ``r``'s remaining prompt besides what the
        prompts already being chunked still need. SGLang admits a prompt only when its whole
        input fits in the free tokens (``PrefillAdder.add_one_req``: ``NO_TOKEN`` when the
        input plus its clipped output estimate exceed ``rem_total_tokens``; the output estimate
        and the running requests' reservation are not modelled), so a chunked prompt never
        runs out of room halfway; admitting on the first chunk's room alone lets a chunk
        preempt itself step after step when the cache barely holds a request."""
        bs = self.cfg.block_size
        owed = sum(max(0, -(-x.target // bs) - len(x.blocks))
                   for x in self.running if x.computed < x.target)  # fmt: skip
        need = max(0, -(-r.target // bs) - len(r.blocks))
        return need + owed <= self.blocks.free_blocks

    def _fits(self, r: Request, q: int) -> bool:
        return len(r.blocks) * self.cfg.block_size >= r.computed + q

    def _admit(
        self, now: float, budget: int, batch: Batch, s: StepShape, chunk: bool, first: bool = False
    ) -> tuple[Batch, StepShape]:
        limit = self.cfg.max_num_seqs - self.held
        while self.waiting and budget > 0 and len(self.running) < limit:
            r = self.waiting[0]
            if r.handoff is not None or not self._seen(r):
                break  # a hand-off joins only through `_admit_handoffs`; unseen ones later
            self._prefix_lookup(r)
            rem = r.target - r.computed
            q = 1 if rem <= 0 else min(rem, budget, self.rank_budget)
            if q < rem and not chunk and not (not batch and budget == self.budget):
                self._unlookup(r)
                # whole prompts only; an over-budget one (a prompt recomputed with its generated
                # tokens: `simulator._check_whole_prompts` refuses longer prompts) runs alone
                break
            if q < rem and not chunk:
                q = rem
            if self.policy == "sglang" and not self._prompt_room(r):
                self._unlookup(r)
                break
            if not self._grow(r, self._reserve(r, q)):
                self._unlookup(r)
                break
            self._start(r, q, s, batch, now)
            budget -= q
        return batch, s

    def _start(self, r: Request, q: int, s: StepShape, batch: Batch, now: float) -> None:
        """Move the head of the queue, ``r``, into the running set with ``q`` tokens this step."""
        self.waiting.popleft()
        self.running.append(r)
        self.blocks.touch()
        if self.blocks.enable_prefix:  # one lookup per admission, however long it waited
            self.prefix_log.append((now, r.target, r.computed))
        if math.isnan(r.first_scheduled):
            r.first_scheduled = now
            # found in the cache at its first admission, as vLLM's ``num_cached_tokens`` (set
            # once): a recompute after a preemption re-finds its own prompt and output blocks
            r.cached_tokens = r.computed
        self._take(r, q, s)
        batch.append((r, q))

    def _static(self, now: float) -> tuple[Batch, StepShape]:
        if self.running:
            return self._running(1 << 30, decode_only=False)
        s = StepShape()
        batch: Batch = []
        while self.waiting and len(self.running) + self.held < self.cfg.max_num_seqs:
            r = self.waiting[0]
            if r.handoff is not None:
                break
            self._prefix_lookup(r)
            q = max(1, r.target - r.computed)
            if not self._grow(r, self._reserve(r, q)):
                self._unlookup(r)
                break
            self._start(r, q, s, batch, now)
        return batch, s
