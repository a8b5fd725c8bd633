package scheduler.connect;

import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.components.Versioned;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.storage.Converter;

/**
 * Reads the scheduler's records (Avro single-object encoding) for sink connectors.
 *
 * It only reads: the ledger never writes these topics through Connect, and a converter that
 * could write would need the schema choice the scheduler's own codec makes.
 */
public final class SingleObjectAvroConverter implements Converter, Versioned {
    private SchemaCatalog catalog;

    @Override
    public void configure(Map<String, ?> configs, boolean isKey) {
        catalog = SchemaCatalog.bundled();
    }

    @Override
    public ConfigDef config() {
        return new ConfigDef();
    }

    @Override
    public byte[] fromConnectData(String topic, Schema schema, Object value) {
        throw new DataException(getClass().getSimpleName() + " only reads the scheduler's records; it cannot write to "
                + topic);
    }

    @Override
    public SchemaAndValue toConnectData(String topic, byte[] value) {
        if (value == null) {
            return SchemaAndValue.NULL; // a tombstone on a compacted topic
        }
        return catalog.decode(value);
    }

    @Override
    public String version() {
        return "1.0.0";
    }
}
