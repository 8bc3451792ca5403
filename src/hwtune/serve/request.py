"""Requests and where they come from: closed loop, open loop (Poisson, gamma), trace files.

Every random choice takes a seed (numpy ``default_rng``), so a workload is reproducible.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hwtune.errors import HwtuneInputError
from hwtune.structured_file import read_utf8, repeated_columns


@dataclass(slots=True, eq=False)
class Request:
    """One request and its progress through a replica.

    ``computed``: tokens whose KV is in the cache; ``target``: tokens to prefill before the next
    token is sampled (prompt, or prompt + generated after a recompute preemption); ``generated``:
    output tokens produced so far.
    """

    rid: int
    arrival: float
    prompt: int
    output: int
    prefix_group: int = -1
    prefix_len: int = 0
    computed: int = 0
    target: int = 0
    generated: int = 0
    blocks: list[int] = field(default_factory=list)
    hashed: int = 0
    last_hash: int = 0
    first_scheduled: float = math.nan
    first_token: float = math.nan
    last_token: float = math.nan
    finish: float = math.nan
    preemptions: int = 0
    cached_tokens: int = 0
    """Prompt tokens found in the prefix cache when the request was first admitted (a recompute
    after a preemption is not counted again)."""
    busy: bool = False
    replica: int = -1
    spec_credit: float = 0.0
    handoff: object = None
    """Disaggregated serving: (prefill replica, its KV blocks) while the prompt's KV cache waits
    on the prefill replica for a decode replica to admit the request and pull it."""
    queued: float = 0.0
    """When the request joined its replica's queue (an engine with an overlap scheduler sees it
    only at its next scheduling pass: `hwtune.serve.scheduler.Replica`)."""
    token_times: list[float] | None = None
    """When the client sees each output token (``simulate(..., record_tokens=True)`` only)."""
    where: str = ""
    """Where the request came from when a file gave it (``trace.csv line 7``), for errors."""

    def tail(self) -> str:
        """An error's closing words naming the request by its index (a trace line is named in
        the error's field, `named`)."""
        return "" if self.where else f" (request {self.rid})"

    def named(self, option: str) -> str:
        """An error's field for a length check: the options that set it (``option``, e.g.
        ``input-len + output-len``), or the trace line that did, in the trace's words."""
        if not self.where:
            return option
        words = option.replace("input-len", "prompt tokens").replace("output-len", "output tokens")
        return f"{self.where}: {words}"

    def __post_init__(self) -> None:
        self.target = self.prompt

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival

    @property
    def tpot(self) -> float:
        """(E2E − TTFT) / (output tokens − 1); NaN for one-token outputs."""
        return time_per_output_token(self.finish - self.first_token, self.output)


def time_per_output_token(first_to_last_s: float, tokens: int) -> float:
    """TPOT of one request: (E2E − TTFT) / (output tokens − 1), the seconds from its first to
    its last token over the gaps between them (``vllm bench serve``'s and genai-perf's
    definition, `hwtune.serve.metrics`); NaN for one output token."""
    if tokens <= 1:
        return math.nan
    return first_to_last_s / (tokens - 1)


@dataclass(frozen=True)
class Workload:
    """Request lengths and arrivals. ``mode``: "closed" (``concurrency`` clients, each sending its
    next request when the previous one finishes), "open" (``arrivals`` given), or "trace"."""

    prompts: tuple[int, ...]
    outputs: tuple[int, ...]
    mode: str = "closed"
    concurrency: int = 1
    arrivals: tuple[float, ...] = ()
    prefix_groups: tuple[int, ...] = ()
    prefix_lens: tuple[int, ...] = ()
    lines: tuple[str, ...] = ()
    """Each request's trace line (``trace.csv line 7``; empty when no file gave them)."""

    def __post_init__(self) -> None:
        if len(self.outputs) != len(self.prompts):
            raise HwtuneInputError("outputs", len(self.outputs), f"{len(self.prompts)} output "
                                   "lengths, one per prompt")  # fmt: skip
        for name, lengths in (("prompt", self.prompts), ("output", self.outputs)):
            if lengths and min(lengths) < 1:  # an output of 0 would still generate one token
                raise HwtuneInputError(f"{name} length", min(lengths), "at least 1 token")

    def __len__(self) -> int:
        return len(self.prompts)

    def make_requests(self) -> list[Request]:
        n = len(self.prompts)
        arr = self.arrivals or (0.0,) * n
        groups = self.prefix_groups or (-1,) * n
        plens = self.prefix_lens or (0,) * n
        lines = self.lines or ("",) * n
        return [Request(i, float(arr[i]), int(self.prompts[i]), int(self.outputs[i]),
                        int(groups[i]), int(plens[i]), where=lines[i]) for i in range(n)]  # fmt: skip


# --- lengths -----------------------------------------------------------------------------------
SHAREGPT_PROMPT_LOGNORMAL = (5.5, 1.0)
SHAREGPT_OUTPUT_LOGNORMAL = (5.3, 0.9)
"""Log-normal (mu, sigma) of token counts close to ShareGPT-V3 as used by vLLM's benchmarks
(prompt median ~250 and mean ~400 tokens, output median ~200 and mean ~300; Kwon et al. SOSP'23
Fig. 11a reports means of 161 input / 338 output tokens for the filtered set, Vidur (Agrawal
et al. MLSys'24) Table 2 gives P:D ratios around 1-2 for chat traces). Generated from a seed; no
dataset is downloaded."""


MAX_REQUESTS = 1_000_000
"""The most requests a generated workload may have. A simulated request costs about 1.5 KB and
30 us (100,000 closed-loop requests of llama3.1-8b on one H100: 150 MB and 2.7 s), so a million
is a run of a gigabyte and a minute, a thousand times vLLM's benchmark default of 1,000 prompts;
a typo of 2^40 asked numpy for 8 TiB of lengths (a MemoryError), and 1e20 overflowed its array
size (a ValueError)."""

MAX_REQUEST_TOKENS = 1_000_000_000
"""The longest prompt or output a generated request may have: a hundred times the longest
context in the catalog (llama4-scout's 10,485,760 tokens). A model's own context length is
checked when a replica admits the request (`hwtune.serve.simulator.check_request_limits`);
this bound keeps a typo from overflowing numpy's int64 lengths first (1e20 did, a traceback)."""


def check_request_count(n: int, name: str = "num_requests") -> None:
    """Refuse a number of requests below 1 or above `MAX_REQUESTS`."""
    if not 1 <= n <= MAX_REQUESTS:
        raise HwtuneInputError(name, n, f"a number of requests from 1 to {MAX_REQUESTS:,} (each "
                               "is simulated: a million takes about a gigabyte and a minute)")  # fmt: skip


def _check_token_counts(prompt: int, output: int) -> None:
    for name, v in (("input_len", prompt), ("output_len", output)):
        if not 1 <= v <= MAX_REQUEST_TOKENS:
            raise HwtuneInputError(name, v, f"a token count from 1 to {MAX_REQUEST_TOKENS:,} "
                                   "(a hundred times the longest context of any catalog model)")  # fmt: skip


def sharegpt_like_lengths(
    n: int, seed: int = 0, max_prompt: int = 4096, max_output: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) lengths from the log-normal mix above, clipped to [4, max]."""
    check_request_count(n)
    rng = np.random.default_rng(seed)
    p = rng.lognormal(*SHAREGPT_PROMPT_LOGNORMAL, size=n)
    o = rng.lognormal(*SHAREGPT_OUTPUT_LOGNORMAL, size=n)
    p = np.clip(np.rint(p), 4, max_prompt).astype(int)
    o = np.clip(np.rint(o), 4, max_output).astype(int)
    return p, o


def fixed_lengths(n: int, prompt: int, output: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` requests of ``prompt`` and ``output`` tokens each."""
    check_request_count(n)
    _check_token_counts(prompt, output)
    return np.full(n, prompt, dtype=int), np.full(n, output, dtype=int)


def range_ratio_lengths(
    n: int, prompt: int, output: int, ratio: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) lengths drawn uniformly from the integers [int(L * ratio), L], as
    InferenceX's benchmark client samples its random dataset with ``--random-range-ratio``
    (SemiAnalysisAI/InferenceX ``utils/bench_serving/benchmark_serving.py``,
    ``sample_random_requests``; NVIDIA/srt-slurm's sa-bench uses the same script). ``ratio`` 1
    gives fixed lengths."""
    if not 0 < ratio <= 1:
        raise HwtuneInputError("range_ratio", ratio, "a fraction in (0, 1]")
    check_request_count(n)
    _check_token_counts(prompt, output)
    for name, length in (("input", prompt), ("output", output)):
        if int(length * ratio) < 1:  # the script would draw 0-token requests; none is raised to 1
            raise HwtuneInputError("range_ratio", ratio, f"at least 1/{length} so that no "
                                   f"{name} length drawn from [int({length} * ratio), {length}] "
                                   "is 0")  # fmt: skip
    rng = np.random.default_rng(seed)
    p = rng.integers(int(prompt * ratio), prompt + 1, size=n)
    o = rng.integers(int(output * ratio), output + 1, size=n)
    return p.astype(int), o.astype(int)


def _check_pos(name: str, v: float) -> None:
    if not 0 < v < math.inf:
        raise HwtuneInputError(name, v, "a positive finite number")


MAX_ARRIVAL_SPAN_S = 1e9
"""The longest span of arrivals, first to last, a workload may have: 1e9 s, about 32 years. The
simulated clock is seconds since the first arrival in float64, which resolves 2^-23 s (0.12 us)
at 1e9 s, far below a step's milliseconds; far later a step's time is lost to rounding
(1e300 + 0.01 == 1e300), and a request would finish the instant it arrived (TTFT 0)."""
_SPAN_YEARS = f"~{MAX_ARRIVAL_SPAN_S / 3.156e7:.0f} years"  # 3.156e7 s in a Julian year

BURSTINESS_RANGE = (1e-150, 10.0)
"""The coefficients of variation of open-loop gaps accepted (gamma shape 1/cv^2). Below the low
end 1/cv^2 overflows (near-constant gaps are fine down to it). Above the high end the draws no
longer realize the rate: the shape is so small that most gaps underflow to exactly 0 s and the
mean gap of a run is set by a few huge ones (at cv 30, 40% of 20 gaps drawn at 5 requests/s are
0 s and their mean is 0.0003 s against 0.2; at cv 1,000 all are 0 s), and past ~1e154 1/cv^2
itself underflows to 0 (a division by zero)."""

MAX_RATE = 1e9
"""The highest open-loop rate accepted, requests/s: a mean gap of 1 ns, below any step time (a
faster stream arrives as one burst)."""


def check_burstiness(cv: float, field: str = "cv") -> None:
    """Refuse a coefficient of variation of gaps outside `BURSTINESS_RANGE` (or not finite)."""
    lo, hi = BURSTINESS_RANGE
    if not lo <= cv <= hi:  # NaN fails too
        raise HwtuneInputError(field, cv, f"a coefficient of variation in [{lo:g}, {hi:g}] (1 = "
                               f"Poisson; above {hi:g} most gamma gaps underflow to 0 s and the "
                               "draws miss the rate)")  # fmt: skip


def check_rate(rate: float, n: int, field: str = "rate") -> None:
    """Refuse a rate that is not positive and finite, above `MAX_RATE`, or so low that ``n``
    arrivals would span more than `MAX_ARRIVAL_SPAN_S` on average."""
    _check_pos(field, rate)
    if rate > MAX_RATE:
        raise HwtuneInputError(field, rate, f"at most {MAX_RATE:g} requests/s (a {1e9 / MAX_RATE:g} ns gap; a "
                               "faster stream arrives as one burst)")  # fmt: skip
    floor = (n - 1) / MAX_ARRIVAL_SPAN_S  # one request spans nothing: no floor
    if rate < floor:
        raise HwtuneInputError(field, rate, f"at least {floor:.3g} requests/s for {n} "
                               f"requests: slower, the arrivals span more than "
                               f"{MAX_ARRIVAL_SPAN_S:g} s ({_SPAN_YEARS}), past which the "
                               "simulated clock cannot resolve step times")  # fmt: skip


def closed_loop(
    concurrency: int, prompts: np.ndarray, outputs: np.ndarray, prefix_len: int = 0,
    prefix_groups: int = 0, seed: int = 0,
) -> Workload:  # fmt: skip
    """``concurrency`` clients that send back-to-back requests (``vllm bench serve
    --max-concurrency``, ``genai-perf --concurrency``): requests 0..C-1 start at time 0, and each
    completion releases the next request. Optional shared prefixes: ``prefix_len`` tokens shared
    within ``prefix_groups`` groups chosen at random."""
    if concurrency < 1:
        raise HwtuneInputError("concurrency", concurrency, "a positive integer")
    groups, plens = _prefixes(len(prompts), prompts, prefix_len, prefix_groups, seed)
    return Workload(tuple(int(x) for x in prompts), tuple(int(x) for x in outputs), "closed",
                    concurrency, (), groups, plens)  # fmt: skip


def open_loop(
    rate: float, prompts: np.ndarray, outputs: np.ndarray, seed: int = 0, cv: float = 1.0,
    prefix_len: int = 0, prefix_groups: int = 0,
) -> Workload:  # fmt: skip
    """Arrivals at ``rate`` requests/s: Poisson (exponential gaps) for ``cv`` = 1, else gamma
    gaps with shape 1/cv^2 and the same mean (``vllm bench serve --burstiness``)."""
    n = len(prompts)
    check_rate(rate, n)
    check_burstiness(cv)
    rng = np.random.default_rng(seed)
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    gaps[0] = 0.0
    arr = np.cumsum(gaps)
    if n and arr[-1] > MAX_ARRIVAL_SPAN_S:  # bursty gaps drawn far above their mean
        raise HwtuneInputError("rate", rate, f"a rate whose {n} arrivals span at most "
                               f"{MAX_ARRIVAL_SPAN_S:g} s ({_SPAN_YEARS}; these, drawn with cv "
                               f"{cv:g}, span {arr[-1]:.3g} s)")  # fmt: skip
    groups, plens = _prefixes(n, prompts, prefix_len, prefix_groups, seed + 1)
    return Workload(tuple(int(x) for x in prompts), tuple(int(x) for x in outputs), "open", 0,
                    tuple(float(a) for a in arr), groups, plens)  # fmt: skip


def _prefixes(
    n: int, prompts: np.ndarray, prefix_len: int, groups: int, seed: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if prefix_len < 0:
        raise HwtuneInputError("prefix_len", prefix_len, "a non-negative token count")
    if groups < 0:
        raise HwtuneInputError("prefix_groups", groups, "a non-negative count")
    if (prefix_len > 0) != (groups > 0):  # one without the other would be ignored
        name, v = ("prefix_groups", groups) if prefix_len > 0 else ("prefix_len", prefix_len)
        raise HwtuneInputError(name, v, "a positive value when the other prefix option is set")
    if prefix_len == 0:
        return (), ()
    shortest = int(min(prompts)) if len(prompts) else prefix_len + 1
    if prefix_len >= shortest:  # it was cut to each shorter prompt less one token
        raise HwtuneInputError("prefix_len", prefix_len, f"fewer tokens than the shortest prompt "
                               f"({shortest} tokens; the last prompt token is always computed)")  # fmt: skip
    rng = np.random.default_rng(seed + 7919)
    g = rng.integers(0, groups, size=n)
    return tuple(int(x) for x in g), (prefix_len,) * n


# --- traces ------------------------------------------------------------------------------------
_ARRIVAL_KEYS = ("arrival_time", "arrival", "timestamp", "TIMESTAMP", "time")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "prompt_len", "ContextTokens", "input_length")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens", "output_len", "GeneratedTokens",
                "output_length")  # fmt: skip
_GROUP_KEYS = ("prefix_group", "prefix_group_id", "session_id")
_PLEN_KEYS = ("prefix_len", "prefix_tokens")


def _pick(row: dict, keys: tuple[str, ...], where: str = "trace") -> object:
    """The row's value under the first of ``keys`` it fills; two of them filled is an error
    (which one was meant is not for the reader to guess)."""
    got = [k for k in keys if k in row and row[k] not in (None, "")]
    if len(got) > 1:
        raise HwtuneInputError(f"{where}: {got[1]}", row[got[1]],
                               f"one column of {', '.join(keys)} per row (it also has "
                               f"{got[0]}={row[got[0]]!r})")  # fmt: skip
    return row[got[0]] if got else None


def _parse_time(v: object) -> tuple[float, str]:
    """Seconds from a number or an ISO timestamp (the Azure LLM inference trace's TIMESTAMP),
    with the format it was written in: "seconds", "an ISO time with a UTC offset" or "an ISO
    time without a UTC offset" (read as this machine's local time). A boolean is neither."""
    if isinstance(v, bool):  # JSON true would be 1 s
        raise TypeError("a boolean is not a time")
    if isinstance(v, int | float):
        return float(v), "seconds"
    s = str(v).strip()
    try:
        return float(s), "seconds"
    except ValueError:
        pass
    from datetime import datetime

    s = s.replace("Z", "+00:00")
    if "." in s:  # Azure traces carry 7 fractional digits; Python parses up to 6
        head, frac = s.split(".", 1)
        digits = "".join(itertools.takewhile(str.isdigit, frac))  # not the offset's digits
        rest = frac[len(digits) :]
        s = f"{head}.{digits[:6]}{rest}"
    dt = datetime.fromisoformat(s)
    kind = "an ISO time " + ("with" if dt.tzinfo is not None else "without") + " a UTC offset"
    return dt.timestamp(), kind


def _group_id(g: object, where: str) -> int:
    """A prefix group id: a non-negative integer as itself, any other string a stable CRC-32 of
    it; a number that is not a non-negative integer (1.5, inf, -3, true) names ``where``."""
    if g is None:
        return -1
    if isinstance(g, str):
        s = g.strip()
        try:
            v: float = float(s)
        except ValueError:
            return zlib.crc32(s.encode())
    elif isinstance(g, int | float) and not isinstance(g, bool):
        v = g
    else:
        raise HwtuneInputError(f"{where}: prefix_group", g, "an integer or a string id")
    if not (math.isfinite(v) and v == int(v) and v >= 0):
        raise HwtuneInputError(f"{where}: prefix_group", g, "a non-negative integer or a string id")
    return int(v)


def _count(v: object, where: str, col: str) -> int:
    """A token count cell: an integer (``"100"``, ``100``, ``100.0``); a fraction, a non-finite
    number, a boolean or text names ``where`` and ``col`` (nothing is truncated)."""
    x: float
    if isinstance(v, bool):
        x = math.nan
    elif isinstance(v, int | float):
        x = v
    else:
        try:
            x = float(str(v).strip())
        except ValueError:
            x = math.nan
    if not (math.isfinite(x) and x == int(x)):
        raise HwtuneInputError(f"{where}: {col}", v, "a whole number of tokens")
    return int(x)


class _RepeatedKey(ValueError):
    """A JSON object that names a key twice (`json.loads` keeps the last silently)."""


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise _RepeatedKey(dup)
    return dict(pairs)


def load_trace(path: str | Path) -> Workload:
    """A trace file: CSV (header row) or JSONL, one request per row with an arrival time
    (seconds, or ISO timestamps as in the Azure LLM inference traces: ``TIMESTAMP``,
    ``ContextTokens``, ``GeneratedTokens``), prompt and output token counts and optionally a
    prefix group id and shared prefix length. Arrivals are shifted to start at 0 and sorted.
    A malformed row raises an error naming its line. A ``.jsonl``/``.json``/``.ndjson`` name is
    read as JSONL and ``.csv`` as CSV; any other name by its first row (``{``: JSONL)."""
    p = Path(path)
    text = read_utf8(p, "trace")
    rows: list[tuple[int, dict]] = []
    first = next((ln.lstrip() for ln in text.splitlines() if ln.strip()), "")
    suffix = p.suffix.lower()
    # JSONL by its name, or by its first row when the name says neither (trace.txt, trace.log)
    if suffix in (".jsonl", ".json", ".ndjson") or (suffix != ".csv" and first.startswith("{")):
        for ln, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, object_pairs_hook=_pairs)
            except json.JSONDecodeError as e:
                raise HwtuneInputError(
                    f"{p.name} line {ln}", line[:60], f"a JSON object ({e.msg})"
                ) from None
            except _RepeatedKey as e:  # which value was meant is not guessed (as for CSV)
                raise HwtuneInputError(f"{p.name} line {ln}", str(e), "each key once") from None
            if not isinstance(obj, dict):
                raise HwtuneInputError(f"{p.name} line {ln}", line[:60], "a JSON object")
            rows.append((ln, obj))
    else:
        if first.startswith(("{", "[")):  # JSON named .csv: its header would be a JSON row
            raise HwtuneInputError(f"{p.name} header", first[:60], "a CSV header row (this "
                                   "looks like JSON: JSONL traces are named .jsonl)")  # fmt: skip
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames:
            raise HwtuneInputError("trace", str(path), "a CSV file with a header row")
        names = list(reader.fieldnames)
        twice = repeated_columns(names)
        if twice:
            raise HwtuneInputError(f"{p.name} header", twice[0], "each column once")
        for i, row in enumerate(reader):
            if None in row:  # more cells than the header names
                raise HwtuneInputError(f"{p.name} line {i + 2}", row[None],
                                       f"at most {len(names)} cells, one per header column")  # fmt: skip
            rows.append((i + 2, row))
    if not rows:
        raise HwtuneInputError("trace", str(path), "at least one request row")
    recs = []
    fmt: tuple[str, int] | None = None  # the first arrival's format and line
    for ln, row in rows:
        where = f"{p.name} line {ln}"
        a, pr, out = (_pick(row, _ARRIVAL_KEYS, where), _pick(row, _PROMPT_KEYS, where),
                      _pick(row, _OUTPUT_KEYS, where))  # fmt: skip
        if a is None or pr is None or out is None:
            raise HwtuneInputError(where, row, "arrival time, prompt tokens and output tokens "
                                   f"(columns such as {_ARRIVAL_KEYS[0]}, {_PROMPT_KEYS[0]}, "
                                   f"{_OUTPUT_KEYS[0]})")  # fmt: skip
        try:
            t, kind = _parse_time(a)
        except (ValueError, TypeError, OverflowError) as e:
            raise HwtuneInputError(
                f"{where}: arrival", a, f"seconds or an ISO time ({e})"
            ) from None
        if not math.isfinite(t):
            raise HwtuneInputError(f"{where}: arrival", a, "a finite time")
        if fmt is None:
            fmt = (kind, ln)
        elif kind != fmt[0]:  # seconds beside timestamps are on no common clock
            raise HwtuneInputError(f"{where}: arrival", a, f"{fmt[0]} as on line {fmt[1]} (one "
                                   f"arrival format per file; this line changes it to "
                                   f"{kind})")  # fmt: skip
        ip = _count(pr, where, "prompt tokens")
        io = _count(out, where, "output tokens")
        for what, n, v in (("prompt tokens", ip, pr), ("output tokens", io, out)):
            if n < 1:  # named by field, with its value as written
                raise HwtuneInputError(f"{where}: {what}", v, "at least 1 token")
        g, pl = _pick(row, _GROUP_KEYS, where), _pick(row, _PLEN_KEYS, where)
        if pl is not None and g is None:  # a length without a group would be ignored
            raise HwtuneInputError(f"{where}: prefix_group", None, f"a prefix_group beside "
                                   f"prefix_len {pl!r} (a length without a group shares nothing)")  # fmt: skip
        gid = _group_id(g, where)
        if g is not None and pl is None:  # a group without a length would share nothing
            raise HwtuneInputError(f"{where}: prefix_len", None, f"a prefix_len beside "
                                   f"prefix_group {g!r} (how many leading tokens the group "
                                   "shares)")  # fmt: skip
        plen = _count(pl, where, "prefix_len") if pl is not None else 0
        if not 0 <= plen < ip:
            raise HwtuneInputError(f"{where}: prefix_len", pl, f"0 to {ip - 1} (below the prompt's "
                                   f"{ip} tokens: its last token is always computed)")  # fmt: skip
        recs.append((t, ip, io, gid, plen, ln, a))
    recs.sort(key=lambda r: r[0])
    t0 = recs[0][0]
    if recs[-1][0] - t0 > MAX_ARRIVAL_SPAN_S:  # the simulated clock would round its steps away
        last, first = recs[-1], recs[0]
        raise HwtuneInputError(f"{p.name} line {last[5]}: arrival", last[6],
                               f"at most {MAX_ARRIVAL_SPAN_S:g} s ({_SPAN_YEARS}) after the first "
                               f"arrival ({first[6]!r}, line {first[5]}): later, the simulated "
                               "clock cannot resolve step times")  # fmt: skip
    return Workload(tuple(r[1] for r in recs), tuple(r[2] for r in recs), "trace", 0,
                    tuple(r[0] - t0 for r in recs), tuple(r[3] for r in recs),
                    tuple(r[4] for r in recs), tuple(f"{p.name} line {r[5]}" for r in recs))  # fmt: skip
