"""Calibration (DESIGN.md, package `calibrate/`): microbenchmarks through torch that measure a
device and write its profile (`hwtune.hardware.profile`), and a reference training loop that
checks the estimator against a real run. torch is imported only inside this package (and
`optim/`, the runtime); `hwtune.cost` never imports it, since a profile is plain data.

- `bench.run_bench` / `hwtune bench`: GEMM, STREAM, memory-bound ops, attention, collectives.
- `reference`: a GPT-style model in torch with shapes from a config, timed per training step.
"""
