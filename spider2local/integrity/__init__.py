"""Integrity of a run: guards on what it scores against, detection of agents reaching out.

:mod:`.guard` fingerprints the gold, the evaluation records and the scorer before any agent
starts and re-checks them before each score (a change is an integrity error, never a verdict);
:mod:`.scan` reads what each agent left for signs that it looked outside its workspace (a hit
marks the task ``suspect``, with the evidence). Both are always on, also without isolation.
"""
