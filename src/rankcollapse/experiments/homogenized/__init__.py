"""Experiment E6 [KGR26]: random multi-head attention particles on the sphere and their
homogenized limits. The paper's model (model.py, simulate.py) and limits (limits.py) apart from
our own derivations and heuristic (ours.py); one job's table (run.py); the summaries the claims
and the notebook read (analysis.py). Map and studies: docs/e6_homogenized.md.
"""
