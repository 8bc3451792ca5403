"""Run a `ParallelSpec` for real on torch.distributed (CPU/gloo or CUDA/NCCL).

One file per concern, as torchtitan: `models` (a tiny GPT and MoE), `tensor_parallel`
(DTensor `parallelize_module`), `data_parallel` (DDP, ZeRO-1 via
`distributed_optimizer`, FSDP2 `fully_shard`), `experts` (all-to-all dispatch), `pipeline` (stages and our compiled
per-rank orders on `torch.distributed.pipelining`'s schedule runtime), `dualpipe` (the
bidirectional DualPipe, which that runtime cannot express, walked by hand), `recompute`
(the plan's per-layer activation checkpointing, and a meter of the bytes autograd keeps),
`context_parallel` (sequences split over cp ranks, K/V all-gathered for exact causal
attention), `device` (gloo/CPU or NCCL/CUDA, a rank's GPU, the refusal), `train` (one rank's loop),
`launch` (processes on 127.0.0.1, or one rank under torchrun: `python -m hwtune.parallel.runtime`). torch is imported only here.
"""
