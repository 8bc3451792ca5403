"""Speculative decoding: draft tokens proposed by a small draft module, verified by the model.

A decode step of an engine with speculative decoding (DeepSeek-V3 MTP, EAGLE; vLLM
``--speculative-config``, SGLang ``--speculative-algorithm``, TensorRT-LLM
``speculative_config``) runs, for each decoding sequence, the model over its last accepted token
and ``k`` draft tokens (the verification: ``k + 1`` query rows), accepts the longest prefix of
drafts that the model agrees with plus the model's own next token, and then runs the draft
module ``k`` times to propose the next drafts (chain drafting: TensorRT-LLM tech blog "DeepSeek
R1 MTP Implementation and Optimization", 2025, MTP Eagle path; Li et al. 2024 "EAGLE", §3).

Tokens gained per step. With a per-draft acceptance rate ``alpha`` (the probability that a draft
is accepted given that the ones before it were, taken as the same at every position), the
expected number of tokens a verification step yields is

    E = (1 - alpha^(k+1)) / (1 - alpha)          (k + 1 when alpha = 1)

(Leviathan, Kalman, Matias, ICML 2023, "Fast Inference from Transformers via Speculative
Decoding", Eq. 1, with gamma = k). DeepSeek-V3's MTP module accepts its draft 85-90% of the time
(DeepSeek-V3 Technical Report, 2024, §5.4.3: "the acceptance rate of the second token
prediction ranges between 85% and 90%"), for "1.8 times TPS". The rate depends on the data
(random-token benchmark prompts accept far fewer: InferenceX's guide, "Raw random tokens tank
spec-decode acceptance"), so it is an input, never a catalog constant.

The simulator spreads the expectation deterministically: each request keeps a running sum of
``E`` and emits the whole tokens of that sum each step (`accepted`), so a request of ``n``
output tokens takes ceil-like ``n / E`` steps and no seed is needed.
"""

from __future__ import annotations

import math

from hwtune.errors import HwtuneInputError

MAX_DRAFT_TOKENS = 16
"""The most draft tokens per step accepted. The drafts priced here are a chain, one draft-module
run (one decoder layer) per token, as DeepSeek MTP and EAGLE chain drafting run them, and
such engines draft a few tokens a step: DeepSeek-V3 has one MTP module, InferenceX's TensorRT-LLM
MTP runs drafted 1 or 3 (`hwtune.serve.published`). At an acceptance of 0.8, 16 drafts already
yield E = 4.89 of the at most 5 tokens a step a chain can, each further draft adding under 0.5%,
and the cost model was never checked that far."""


def expected_tokens_per_step(draft_tokens: int, acceptance: float) -> float:
    """Expected tokens one verification step yields (Leviathan et al. 2023, Eq. 1)."""
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or draft_tokens < 0:
        raise HwtuneInputError("spec_tokens", draft_tokens, "a non-negative integer")
    if draft_tokens > MAX_DRAFT_TOKENS:
        raise HwtuneInputError("spec_tokens", draft_tokens, f"at most {MAX_DRAFT_TOKENS} draft "
                               "tokens per step (MTP and EAGLE engines chain a few; "
                               "hwtune.serve.speculative.MAX_DRAFT_TOKENS)")  # fmt: skip
    if not 0.0 <= acceptance <= 1.0 or math.isnan(acceptance):
        raise HwtuneInputError("spec_acceptance", acceptance, "a probability in [0, 1]")
    if draft_tokens == 0:
        return 1.0
    if acceptance >= 1.0:
        return float(draft_tokens + 1)
    return (1.0 - acceptance ** (draft_tokens + 1)) / (1.0 - acceptance)


def accepted(credit: float, per_step: float, left: int) -> tuple[int, float]:
    """(tokens emitted this step, carried credit) for a request with ``credit`` carried from
    earlier steps, ``per_step`` expected tokens per step and ``left`` tokens still to generate:
    the whole part of ``credit + per_step``, at least 1 and at most ``left``."""
    total = credit + per_step
    n = max(1, int(total + 1e-9))
    n = min(n, max(1, left))
    return n, max(0.0, total - n)


__all__ = ["MAX_DRAFT_TOKENS", "accepted", "expected_tokens_per_step"]
