"""A reference for the serving simulator: prefill and decode iteration times of a Hugging Face
`transformers` Llama-architecture model with random weights, measured on this machine.

The model is `transformers.LlamaForCausalLM` built from a `LlamaConfig` (no download): RMSNorm
pre-norm blocks, rotary positions, grouped-query attention through torch's
`scaled_dot_product_attention`, a SwiGLU MLP and an untied LM head (Touvron et al. 2023,
"Llama 2", §2.1). It runs in fp32 under ``torch.inference_mode``, on one torch thread (as
`hwtune bench --threads 1` measures the device), so the process CPU time is the time the step
would take alone on a shared machine (`hwtune.calibrate.harness.resolve_clock`).

What is timed is what one engine step of the serving simulator (`hwtune.serve.iteration`) runs:

- prefill: ``b`` prompts of ``s`` tokens in one forward with an empty cache, logits for the last
  position only (``logits_to_keep=1``; serving engines run the LM head on sampled rows only);
- decode: one new token for each of ``b`` sequences whose `DynamicCache` holds ``c`` tokens;
  after each timed step the cache is cropped back to ``c``, so every step sees the same context.

Each shape gets ``warmup`` untimed runs and the median of ``reps`` timed runs. Run it as
``python -m hwtune.calibrate.serving_reference --batch 4 --context 512 --json``;
`model_spec` gives the `ModelSpec` the simulator uses for the same model.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from hwtune.calibrate.harness import resolve_clock
from hwtune.model.spec import ModelSpec


@dataclass(frozen=True)
class LlamaRefConfig:
    """Shapes of the reference Llama model (Hugging Face ``LlamaConfig`` fields)."""

    hidden: int = 512
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2
    intermediate: int = 1536
    vocab: int = 8192
    max_position: int = 4096
    seed: int = 0

    def hf_config(self) -> Any:
        from transformers import LlamaConfig

        return LlamaConfig(
            hidden_size=self.hidden, num_hidden_layers=self.layers,
            num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            intermediate_size=self.intermediate, vocab_size=self.vocab,
            max_position_embeddings=self.max_position, tie_word_embeddings=False,
            attn_implementation="sdpa", torch_dtype="float32",
        )  # fmt: skip


def model_spec(cfg: LlamaRefConfig) -> ModelSpec:
    """The `ModelSpec` of the reference model, read from its Hugging Face config."""
    from hwtune.model.hf_config import load_hf_config

    return load_hf_config(cfg.hf_config().to_dict(), name=f"ref-llama-L{cfg.layers}-h{cfg.hidden}")


def build_model(cfg: LlamaRefConfig) -> torch.nn.Module:
    """``LlamaForCausalLM`` with random weights (seeded), fp32, eval mode."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(cfg.hf_config())
    return model.to(torch.float32).eval()


@dataclass
class ServingMeasurement:
    """Measured seconds of one step shape; ``median_s`` by ``clock``."""

    phase: str  # prefill | decode
    batch: int
    tokens: int  # prompt length (prefill) or cached context (decode)
    clock: str
    median_s: float
    wall_median_s: float
    cpu_median_s: float
    reps_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class ServingReference:
    """One model, timed at several step shapes (``threads`` torch threads; 1 by default)."""

    def __init__(
        self,
        cfg: LlamaRefConfig | None = None,
        threads: int = 1,
        warmup: int = 2,
        reps: int = 5,
        clock: str = "auto",
    ) -> None:
        self.cfg = cfg or LlamaRefConfig()
        torch.set_num_threads(threads)
        self.clock = resolve_clock(clock, "cpu", threads)
        self.warmup, self.reps = warmup, reps
        self.model = build_model(self.cfg)
        self.gen = torch.Generator().manual_seed(self.cfg.seed + 1)

    def _ids(self, b: int, s: int) -> torch.Tensor:
        return torch.randint(0, self.cfg.vocab, (b, s), generator=self.gen)

    def _time(self, fn: Any, after: Any = None) -> tuple[list[float], list[float]]:
        walls, cpus = [], []
        for i in range(self.warmup + self.reps):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            w, c = time.perf_counter() - t0, time.process_time() - c0
            if after is not None:
                after()
            if i >= self.warmup:
                walls.append(w)
                cpus.append(c)
        return walls, cpus

    def _result(self, phase: str, b: int, n: int, walls: list, cpus: list) -> ServingMeasurement:
        reps = cpus if self.clock == "cpu" else walls
        return ServingMeasurement(
            phase=phase, batch=b, tokens=n, clock=self.clock, median_s=statistics.median(reps),
            wall_median_s=statistics.median(walls), cpu_median_s=statistics.median(cpus),
            reps_s=reps,
        )  # fmt: skip

    @torch.inference_mode()
    def prefill(self, batch: int, prompt: int) -> ServingMeasurement:
        """Seconds of one prefill step: ``batch`` prompts of ``prompt`` tokens, empty cache."""
        ids = self._ids(batch, prompt)

        def step() -> None:
            self.model(input_ids=ids, use_cache=True, logits_to_keep=1)

        walls, cpus = self._time(step)
        return self._result("prefill", batch, prompt, walls, cpus)

    @torch.inference_mode()
    def decode(self, batch: int, context: int) -> ServingMeasurement:
        """Seconds of one decode step: ``batch`` sequences, ``context`` cached tokens each."""
        from transformers import DynamicCache

        # the model's KV-cache argument: ``past_key_values``, ``cache`` in newer transformers
        params = inspect.signature(self.model.forward).parameters
        key = "cache" if "cache" in params else "past_key_values"
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=self._ids(batch, context), use_cache=True, logits_to_keep=1,
                   **{key: cache})  # fmt: skip
        assert cache.get_seq_length() == context
        nxt = self._ids(batch, 1)
        pos = torch.full((batch, 1), context, dtype=torch.long)

        def step() -> None:
            self.model(input_ids=nxt, position_ids=pos, cache_position=pos[0], use_cache=True,
                       logits_to_keep=1, **{key: cache})  # fmt: skip

        def reset() -> None:  # back to ``context`` cached tokens (crop takes a negative count)
            extra = cache.get_seq_length() - context
            if extra > 0:
                cache.crop(-extra)

        walls, cpus = self._time(step, after=reset)
        return self._result("decode", batch, context, walls, cpus)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="hwtune serving reference (HF Llama, random weights)")
    d = LlamaRefConfig()
    for f in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(d, f))
    ap.add_argument("--phase", choices=("prefill", "decode"), default="decode")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=512, help="prompt length or cached context")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clock", default="auto", choices=("auto", "wall", "cpu"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    cfg = LlamaRefConfig(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                         intermediate=a.intermediate, vocab=a.vocab)  # fmt: skip
    ref = ServingReference(cfg, warmup=a.warmup, reps=a.reps, clock=a.clock)
    m = getattr(ref, a.phase)(a.batch, a.context)
    if a.json:
        print(json.dumps(m.to_dict(), indent=1))
    else:
        print(f"{a.phase} b{a.batch} {'s' if a.phase == 'prefill' else 'c'}{a.context}: "
              f"median {m.median_s * 1e3:.2f} ms ({m.clock} clock; wall "
              f"{m.wall_median_s * 1e3:.2f} ms)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
