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

-- dispatches and attempts: RANGE partitions on scheduled_for_ms, one per UTC day plus a DEFAULT, made by
-- `audit ensure` / `audit retain` (partition_db.py). A partitioned table's primary key must hold the
-- partition column, so it is the Kafka coordinates and scheduled_for_ms (their connectors' key too).
-- An older ledger's plain tables are left as they are (IF NOT EXISTS); ensure reports them.
CREATE TABLE IF NOT EXISTS {schema}.dispatches (
    kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
    kafka_timestamp timestamptz,
    occurrence_id text NOT NULL, schedule_id text NOT NULL, tenant text NOT NULL, schedule_version bigint,
    scheduled_for_ms bigint NOT NULL, available_at_ms bigint, priority text, payload bytea, attempt integer,
    dst_rule text, catch_up boolean, lease_ms bigint,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset, scheduled_for_ms)
) PARTITION BY RANGE (scheduled_for_ms);
CREATE INDEX IF NOT EXISTS dispatches_tenant_time ON {schema}.dispatches (tenant, scheduled_for_ms);
CREATE INDEX IF NOT EXISTS dispatches_occurrence ON {schema}.dispatches (occurrence_id);

-- Not partitioned: scheduled_for_ms is null for a range event, and no other column is what the reconciler
-- reads it by (docs/operations.md, Partitions and retention); it holds only what was not sent.
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
    occurrence_id text, schedule_id text, tenant text, schedule_version bigint, scheduled_for_ms bigint NOT NULL,
    attempt integer, attempt_token text, kind text, retryable boolean, error_class text, error_message text,
    worker_id text, at_ms bigint, progress text,
    PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset, scheduled_for_ms)
) PARTITION BY RANGE (scheduled_for_ms);
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

-- The ledger's own metadata. ledger_settings: `payload` is full, hash or none (`audit ensure --payload`),
-- read by the dispatches trigger below on every row, so changing it is an UPDATE, not a new function.
-- ledger_retention: every daily range `audit retain` dropped; `scheduler reconcile` refuses a range
-- overlapping one (the proof cannot be made over deleted history).
CREATE TABLE IF NOT EXISTS {schema}.ledger_settings (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {schema}.ledger_retention (
    table_name text NOT NULL, range_start_ms bigint NOT NULL, range_end_ms bigint NOT NULL,
    dropped_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, range_start_ms)
);

-- BEFORE INSERT only: the sink's upsert is INSERT ... ON CONFLICT DO UPDATE SET payload = EXCLUDED.payload,
-- and EXCLUDED already passed this trigger, so a BEFORE UPDATE one would hash the hash of a redelivery.
-- No settings row reads as hash, the default.
CREATE OR REPLACE FUNCTION {schema}.dispatch_payload() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    CASE coalesce((SELECT value FROM {schema}.ledger_settings WHERE name = 'payload'), 'hash')
        WHEN 'full' THEN NULL;
        WHEN 'none' THEN NEW.payload := NULL;
        ELSE NEW.payload := sha256(NEW.payload);
    END CASE;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER dispatch_payload BEFORE INSERT ON {schema}.dispatches
    FOR EACH ROW EXECUTE FUNCTION {schema}.dispatch_payload();
