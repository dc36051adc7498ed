"""The sequential A/B comparison (issue 31): the decision (analysis) and its record in a run
folder (record). Below run/ and report/, which both use it; imports nothing of ours above the
shared helpers."""
