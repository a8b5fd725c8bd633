-- The audit ledger's tables (the LEDGER contract; docs/reconcile.md). {schema} is the topic prefix
-- lower-cased with every character outside [a-z0-9_] replaced by '_'. Idempotent: safe to run again.
-- Columns: the Kafka coordinates, then the Avro record's top-level fields under their own names
-- (long -> bigint, int -> integer, string/enum -> text, bytes -> bytea, nested records/arrays -> JSON text).
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {schema}.schedule_versions (
    kafka_topic text, kafka_partition integer, kafka_offset bigint, kafka_timestamp timestamptz,
    schedule_id text NOT NULL, tenant text NOT NULL, version bigint NOT NULL, state text NOT NULL,
    spec text NOT NULL, idempotency_key text, create_command_id text, created_at_ms bigint,
    updated_at_ms bigint, next_fire_ms bigint, fired_count bigint, pending text, running text,
    admission_waiters text, first_next_fires_ms text, lost_attempts text, pause_note text,
    PRIMARY KEY (schedule_id, version)
);
CREATE INDEX IF NOT EXISTS schedule_versions_tenant ON {schema}.schedule_versions (tenant, schedule_id);

CREATE TABLE IF NOT EXISTS {schema}.command_results (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    command_id text, schedule_id text, tenant text, command_type text, status text, version bigint,
    next_fires_ms text, reason text, message text, source text, processed_at_ms bigint,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS command_results_tenant ON {schema}.command_results (tenant, schedule_id);

CREATE TABLE IF NOT EXISTS {schema}.dispatches (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence_id text NOT NULL, schedule_id text NOT NULL, tenant text NOT NULL, schedule_version bigint,
    scheduled_for_ms bigint, available_at_ms bigint, priority text, payload bytea, attempt integer,
    dst_rule text, catch_up boolean, lease_ms bigint,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS dispatches_tenant_time ON {schema}.dispatches (tenant, scheduled_for_ms);
CREATE INDEX IF NOT EXISTS dispatches_occurrence ON {schema}.dispatches (occurrence_id);

CREATE TABLE IF NOT EXISTS {schema}.occurrence_events (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence_id text, schedule_id text, tenant text, schedule_version bigint, scheduled_for_ms bigint,
    kind text, reason text, range_first_ms bigint, range_last_ms bigint, count bigint, recorded_at_ms bigint,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS occurrence_events_tenant ON {schema}.occurrence_events (tenant, scheduled_for_ms);

CREATE TABLE IF NOT EXISTS {schema}.attempts (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence_id text, schedule_id text, tenant text, schedule_version bigint, scheduled_for_ms bigint,
    attempt integer, attempt_token text, kind text, retryable boolean, error_class text, error_message text,
    worker_id text, at_ms bigint, progress text,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS attempts_tenant_time ON {schema}.attempts (tenant, scheduled_for_ms);

CREATE TABLE IF NOT EXISTS {schema}.dead_letters (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence text, history text, reason text, dead_at_ms bigint,
    occurrence_id text GENERATED ALWAYS AS ((occurrence::jsonb) ->> 'occurrence_id') STORED,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
);
CREATE INDEX IF NOT EXISTS dead_letters_topic ON {schema}.dead_letters (kafka_topic);

-- Columns of fields added to the records since a ledger was first created (schemas evolve by adding
-- fields only, so adding their columns is the whole migration).
ALTER TABLE {schema}.schedule_versions ADD COLUMN IF NOT EXISTS lost_attempts text;
ALTER TABLE {schema}.schedule_versions ADD COLUMN IF NOT EXISTS pause_note text;
ALTER TABLE {schema}.dispatches ADD COLUMN IF NOT EXISTS lease_ms bigint;
ALTER TABLE {schema}.attempts ADD COLUMN IF NOT EXISTS progress text;
