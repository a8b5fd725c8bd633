package scheduler.connect;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.errors.DataException;

/**
 * Every schema version the scheduler ever wrote, found by its CRC-64-AVRO fingerprint.
 *
 * A body written with a historical version is read into the current version of the same record
 * (Avro schema resolution), so one topic always yields one Connect schema, whatever its age.
 */
public final class SchemaCatalog {
    static final byte MAGIC_0 = (byte) 0xC3;
    static final byte MAGIC_1 = (byte) 0x01;
    static final int HEADER_SIZE = 10;
    static final String RESOURCE_DIR = "scheduler-schemas/";

    /** One known writer schema and how its records are read and mapped. */
    record Entry(Schema writer, Schema reader, GenericDatumReader<GenericRecord> datumReader, ConnectMapping mapping) {
    }

    private final Map<Long, Entry> byFingerprint;

    SchemaCatalog(Map<String, Schema> current, Collection<Schema> history) {
        Map<Long, Entry> entries = new HashMap<>();
        for (Schema schema : current.values()) {
            entries.put(fingerprint(schema), entry(schema, schema));
        }
        for (Schema old : history) {
            Schema now = current.get(old.getFullName());
            entries.putIfAbsent(fingerprint(old), entry(old, now == null ? old : now));
        }
        this.byFingerprint = Collections.unmodifiableMap(entries);
    }

    private static Entry entry(Schema writer, Schema reader) {
        return new Entry(writer, reader, new GenericDatumReader<>(writer, reader), new ConnectMapping(reader));
    }

    /** The schemas bundled into this jar at build time (index.txt: path, tab, the Python side's fingerprint). */
    public static SchemaCatalog bundled() {
        Map<String, Schema> current = new HashMap<>();
        java.util.List<Schema> history = new java.util.ArrayList<>();
        for (String line : resource("index.txt").split("\n")) {
            String path = line.split("\t")[0].strip();
            if (path.isEmpty()) {
                continue;
            }
            Schema schema = new Schema.Parser().parse(resource(path));
            if (path.startsWith("history/")) {
                history.add(schema);
            } else {
                current.put(schema.getFullName(), schema);
            }
        }
        if (current.isEmpty()) {
            throw new IllegalStateException("no schemas bundled in " + RESOURCE_DIR + ": rebuild the converter");
        }
        return new SchemaCatalog(current, history);
    }

    static String resource(String path) {
        try (InputStream in = SchemaCatalog.class.getClassLoader().getResourceAsStream(RESOURCE_DIR + path)) {
            if (in == null) {
                throw new IllegalStateException("missing resource " + RESOURCE_DIR + path + ": rebuild the converter");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static long fingerprint(Schema schema) {
        return SchemaNormalization.parsingFingerprint64(schema);
    }

    public int size() {
        return byFingerprint.size();
    }

    public Entry entry(long fingerprint) {
        return byFingerprint.get(fingerprint);
    }

    /** Decodes one framed record; anything else is a DataException saying why (it goes to the DLQ). */
    public SchemaAndValue decode(byte[] data) {
        if (data.length < HEADER_SIZE || data[0] != MAGIC_0 || data[1] != MAGIC_1) {
            throw new DataException("not Avro single-object encoding: expected C3 01 and an 8-byte fingerprint, got "
                    + data.length + " bytes starting " + hexPrefix(data));
        }
        long fingerprint = ByteBuffer.wrap(data, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        Entry entry = byFingerprint.get(fingerprint);
        if (entry == null) {
            throw new DataException(String.format("unknown writer schema fingerprint %016x: not in schemas/ nor "
                    + "schemas/history/ (rebuild the converter after adding a schema)", fingerprint));
        }
        ByteArrayInputStream body = new ByteArrayInputStream(data, HEADER_SIZE, data.length - HEADER_SIZE);
        BinaryDecoder decoder = DecoderFactory.get().directBinaryDecoder(body, null);
        GenericRecord record;
        try {
            record = entry.datumReader().read(null, decoder);
        } catch (IOException | RuntimeException e) {
            throw new DataException("truncated or corrupt " + entry.writer().getFullName() + " body: " + e, e);
        }
        if (body.available() > 0) {
            throw new DataException(body.available() + " trailing bytes after a " + entry.writer().getFullName() + " body");
        }
        return entry.mapping().toConnect(record);
    }

    private static String hexPrefix(byte[] data) {
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < Math.min(4, data.length); i++) {
            text.append(String.format("%02x", data[i]));
        }
        return text.length() == 0 ? "(empty)" : text.toString();
    }
}
