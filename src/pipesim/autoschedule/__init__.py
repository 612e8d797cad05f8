"""Automatic scheduling: op orders searched for given costs and a memory limit.

``problem``  what is being scheduled (placement, per-stage costs, latency, memory model);
``greedy``   a list scheduler with a few policies, fast at any size;
``exact``    CP-SAT (OR-Tools), which proves optimality for small sizes.
"""
