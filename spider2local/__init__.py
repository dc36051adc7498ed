"""spider2local: run Spider2-DBT locally, deterministically, and score it exactly like upstream."""

__version__ = "0.1.0"
