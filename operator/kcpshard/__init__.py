"""kcp-shard-operator: blue/green rolls of kcp shards."""

__version__ = "0.1.0"
