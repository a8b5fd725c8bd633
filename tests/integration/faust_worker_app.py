"""A faust app whose agent runs the test handlers through scheduler.worker.faust_adapter.

Started by test_worker_faust.py as `python faust_worker_app.py worker`; configured by environment.
"""
from __future__ import annotations

import os

import faust
import worker_handlers

from scheduler.worker.faust_adapter import attach

bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
app = faust.App(
    os.environ["FAUST_APP_ID"],
    broker=f"kafka://{bootstrap}",
    store="memory://",
    datadir=os.environ["FAUST_DATADIR"],
    web_enabled=False,
    topic_replication_factor=1,
    topic_partitions=1,
    broker_commit_every=1,
)
attach(app, bootstrap=bootstrap, prefix=os.environ["SCHEDULER_TOPIC_PREFIX"], tenant=os.environ["WORKER_TEST_TENANT"],
       handler=getattr(worker_handlers, os.environ["WORKER_TEST_HANDLER"]), worker_id="faust-test")

if __name__ == "__main__":
    app.main()
