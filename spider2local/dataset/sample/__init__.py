"""The bundled sample suite: small tasks of our own in upstream Spider2-DBT's layout.

Sources are text inside the package; :func:`ensure_built` turns them into a cached dataset root.
"""

from spider2local.dataset.sample.build import SAMPLE_TASK_IDS, default_cache_dir, ensure_built

__all__ = ["SAMPLE_TASK_IDS", "default_cache_dir", "ensure_built"]
