-- The audit ledger's tables (docs/audit.md; the contract is shared with `scheduler reconcile`).
-- `{schema}` is the topic prefix as a PostgreSQL identifier (scheduler/audit/ledger.py). Every
-- column except kafka_* is a top-level field of the Avro record, named as in schemas/*.avsc;
-- nested records and arrays are JSON text; times stay epoch-millisecond bigints. Columns are
-- nullable beyond the keys so that a field added to a schema later is a new nullable column.
-- Filled only by Kafka Connect's JDBC sinks (scheduler/audit/connectors/), with upserts on the
-- primary keys, so a record Connect redelivers rewrites its own row and never adds one.

CREATE SCHEMA IF NOT EXISTS {schema};

-- <prefix>.schedules (compacted ScheduleState changelog; tombstones dropped): one row per version,
-- the latest record of that version; the topic forgets old versions, this table never does.
CREATE TABLE IF NOT EXISTS {schema}.schedule_versions (
    kafka_topic text, kafka_partition integer, kafka_offset bigint, kafka_timestamp timestamptz,
    schedule_id text NOT NULL,
    tenant text,
    version bigint NOT NULL,
    state text,
    spec text,
    idempotency_key text,
    create_command_id text,
    created_at_ms bigint,
    updated_at_ms bigint,
    next_fire_ms bigint,
    fired_count bigint,
    pending text,
    running text,
    admission_waiters text,
    first_next_fires_ms text,
    PRIMARY KEY (schedule_id, version)
);

-- <prefix>.command-results: ACCEPTED rows give the instant a version was accepted.
CREATE TABLE IF NOT EXISTS {schema}.command_results (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    command_id text,
    schedule_id text,
    tenant text,
    command_type text,
    status text,
    version bigint,
    next_fires_ms text,
    reason text,
    message text,
    source text,
    processed_at_ms bigint,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS command_results_schedule ON {schema}.command_results (schedule_id, version);

-- <prefix>.occurrences.<tenant>.<priority>: one row per delivery; kafka_timestamp is the enqueue instant.
CREATE TABLE IF NOT EXISTS {schema}.dispatches (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence_id text,
    schedule_id text,
    tenant text,
    schedule_version bigint,
    scheduled_for_ms bigint,
    available_at_ms bigint,
    priority text,
    payload bytea,
    attempt integer,
    dst_rule text,
    catch_up boolean,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS dispatches_schedule ON {schema}.dispatches (tenant, schedule_id, scheduled_for_ms);
CREATE INDEX IF NOT EXISTS dispatches_occurrence ON {schema}.dispatches (occurrence_id);

-- <prefix>.occurrence-events: MISSED, SKIPPED_*, CANCELED, INVALIDATED... as the scheduler decided them.
CREATE TABLE IF NOT EXISTS {schema}.occurrence_events (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence_id text,
    schedule_id text,
    tenant text,
    schedule_version bigint,
    scheduled_for_ms bigint,
    kind text,
    reason text,
    range_first_ms bigint,
    range_last_ms bigint,
    count bigint,
    recorded_at_ms bigint,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS occurrence_events_schedule ON {schema}.occurrence_events (tenant, schedule_id);

-- <prefix>.attempts: every attempt step the workers report.
CREATE TABLE IF NOT EXISTS {schema}.attempts (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence_id text,
    schedule_id text,
    tenant text,
    schedule_version bigint,
    scheduled_for_ms bigint,
    attempt integer,
    attempt_token text,
    kind text,
    retryable boolean,
    error_class text,
    error_message text,
    worker_id text,
    at_ms bigint,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS attempts_occurrence ON {schema}.attempts (occurrence_id);

-- <prefix>.dead-letters.<tenant>: `occurrence` and `history` are JSON text; occurrence_id is taken from it.
CREATE TABLE IF NOT EXISTS {schema}.dead_letters (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence text,
    history text,
    reason text,
    dead_at_ms bigint,
    occurrence_id text GENERATED ALWAYS AS ((occurrence::jsonb) ->> 'occurrence_id') STORED,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS dead_letters_occurrence ON {schema}.dead_letters (occurrence_id);
