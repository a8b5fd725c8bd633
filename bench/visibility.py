"""When each record became visible to `read_committed` consumers, measured at the broker (issue 16).

A record is visible to a `read_committed` consumer once its partition's last stable offset (LSO) has
passed it: the LSO stops at the first record of the oldest open transaction and moves past a transaction's
records when its commit marker is written. A probe in its own process asks the broker for the LSO of every
partition of the run's occurrence topics every `interval_s` and writes each change with the time its answer
arrived, so a record's visible time is the first answer that showed the LSO past its offset: at most one
interval plus one round trip after the fact, never before it.

Why not the reader's receive time alone: one reader process receiving 500,000 records on the 2 cores the
broker and the engine share needs ~3 s for them, so its receive time measures the reader once a burst is
visible at once. Both figures are reported. The probe speaks the ListOffsets request (v2, the first with an
isolation level) on one socket to the bootstrap broker, which must lead every partition (the single-node
broker the benches start): librdkafka's admin `list_offsets` costs ~27 ms of Python per call for 808
partitions, this ~1.5 ms, the broker ~12 ms either way.
"""
from __future__ import annotations

import bisect
import os
import socket
import struct
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from children import detach

LIST_OFFSETS = 2  # api key
VERSION = 2
LATEST = -1
READ_COMMITTED = 1
_HEAD = struct.Struct(">hhi")  # api key, version, correlation id; the client id follows
_PARTITION = struct.Struct(">ihqq")  # partition, error code, timestamp, offset
_CHANGE = struct.Struct(">qHHq")  # answer ms, topic index, partition, LSO


class OffsetsProbe:
    """Last stable offsets of a fixed set of partitions, one ListOffsets request per call."""

    def __init__(self, bootstrap: str, partitions: dict[str, int]) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0
        client = b"bench-visibility"
        body = [struct.pack(">ibi", -1, READ_COMMITTED, len(partitions))]
        for topic, count in partitions.items():
            name = topic.encode()
            body.append(struct.pack(">h", len(name)) + name + struct.pack(">i", count))
            body.extend(struct.pack(">iq", p, LATEST) for p in range(count))
        self.client = struct.pack(">h", len(client)) + client
        self.body = b"".join(body)

    def last_stable(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> LSO, for the partitions the broker answered without error."""
        self.correlation += 1
        message = _HEAD.pack(LIST_OFFSETS, VERSION, self.correlation) + self.client + self.body
        self.sock.sendall(struct.pack(">i", len(message)) + message)
        data = self._read(struct.unpack(">i", self._read(4))[0])
        correlation, _throttle, topics = struct.unpack_from(">iii", data, 0)
        if correlation != self.correlation:
            raise RuntimeError(f"ListOffsets answer {correlation} for request {self.correlation}")
        pos = 12
        out: dict[tuple[str, int], int] = {}
        for _ in range(topics):
            (length,) = struct.unpack_from(">h", data, pos)
            name = data[pos + 2:pos + 2 + length].decode()
            pos += 2 + length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(count):
                partition, error, _ts, offset = _PARTITION.unpack_from(data, pos)
                pos += _PARTITION.size
                if error == 0:
                    out[(name, partition)] = offset
        return out

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("the broker closed the ListOffsets connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def probe(bootstrap: str, topics: list[str], watched: list[str], out_path: str, stop: Any,
          interval_s: float) -> None:
    """Write every LSO change of the `watched` topics' partitions (indexed as in `topics`) until `stop`.
    In its own process group like the reader, and stops by itself should the bench die."""
    parent = detach()
    index = {name: i for i, name in enumerate(topics)}
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    offsets = OffsetsProbe(bootstrap, {name: len(metadata[name].partitions) for name in watched})
    last: dict[tuple[str, int], int] = {}
    with open(out_path, "wb") as out:
        while not stop.is_set() and os.getppid() == parent:
            began = time.monotonic()
            answer = offsets.last_stable()
            answered = time.time_ns() // 1_000_000
            changes = [_CHANGE.pack(answered, index[topic], partition, lso)
                       for (topic, partition), lso in answer.items() if last.get((topic, partition)) != lso]
            if changes:
                out.write(b"".join(changes))
                out.flush()
                last.update(answer)
            time.sleep(max(0.0, interval_s - (time.monotonic() - began)))
    offsets.close()


class VisibleAt:
    """The probe's record, read back: when a given offset of a partition first lay below its LSO."""

    def __init__(self, path: Path) -> None:
        series: dict[tuple[int, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        data = path.read_bytes() if path.exists() else b""
        for pos in range(0, len(data) - len(data) % _CHANGE.size, _CHANGE.size):
            answered, topic, partition, lso = _CHANGE.unpack_from(data, pos)
            lsos, times = series[(topic, partition)]
            lsos.append(lso)
            times.append(answered)
        self.series = dict(series)

    def at(self, topic: int, partition: int, offset: int) -> int | None:
        """The first answer's time with the LSO past `offset`, or None if the probe never saw it."""
        lsos, times = self.series.get((topic, partition), ((), ()))
        i = bisect.bisect_right(lsos, offset)
        return times[i] if i < len(lsos) else None
