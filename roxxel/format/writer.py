"""The writer's names before it was split by concern (kept importable here): :class:`DatasetWriter`
(:mod:`roxxel.format.dataset_writer`), :class:`ShardWriter` (:mod:`roxxel.format.shard_writer`), the
background threads (:mod:`roxxel.format.background`) and the dataset directory's lock and marker
(:mod:`roxxel.format.directory`).
"""

from roxxel.format.dataset_writer import DEFAULT_SHARD_SIZE, DatasetWriter, join_documents
from roxxel.format.directory import pending_shards
from roxxel.format.shard_writer import ShardWriter

__all__ = ["DEFAULT_SHARD_SIZE", "DatasetWriter", "ShardWriter", "join_documents", "pending_shards"]
