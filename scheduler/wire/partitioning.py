"""Java-compatible key partitioning.

Kafka's Java producer (and Kafka Streams, Kafka Connect) place a keyed record in
`toPositive(murmur2(key)) % partitions`. librdkafka's default partitioner hashes with
CRC32 instead, so a Python producer left on defaults would put a schedule_id on a
different partition than a Java producer and break co-partitioning of the inputs
with the store changelogs. Every producer of this project uses PRODUCER_PARTITIONER_CONF.
"""
from __future__ import annotations

import struct

# librdkafka's name for Java's algorithm (random partition only for null keys).
PRODUCER_PARTITIONER_CONF: dict[str, str] = {"partitioner": "murmur2_random"}

_WORDS = struct.Struct("<I")  # the key's whole 4-byte words, little-endian as Java reads them
_MASK32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """`org.apache.kafka.common.utils.Utils.murmur2`: a signed 32-bit int, as Java returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    tail = length & ~3
    for (k,) in _WORDS.iter_unpack(data[:tail]):
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    remaining = length & 3
    if remaining == 3:
        h ^= data[tail + 2] << 16
    if remaining >= 2:
        h ^= data[tail + 1] << 8
    if remaining >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for `key` (`Utils.toPositive`, then modulo)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
