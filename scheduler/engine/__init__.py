"""The scheduler engine: stream tasks over schedule commands, RocksDB state, transactional dispatch."""
