"""Serving: the discrete-event simulator of LLM serving, its workloads, calibration tiers, deployment search and live endpoint tools."""
