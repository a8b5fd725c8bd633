"""The wire format: schemas, codec, the vocabulary derived from them, topic layout and key partitioning.
Imports nothing above `scheduler.config` and `scheduler.timing`."""
