"""The model gateway between an agent and its API (see :mod:`.server`)."""
