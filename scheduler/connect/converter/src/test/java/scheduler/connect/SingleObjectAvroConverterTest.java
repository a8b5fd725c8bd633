package scheduler.connect;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Timestamp;
import org.apache.kafka.connect.errors.DataException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class SingleObjectAvroConverterTest {
    private static final SingleObjectAvroConverter CONVERTER = converter();

    private static SingleObjectAvroConverter converter() {
        SingleObjectAvroConverter converter = new SingleObjectAvroConverter();
        converter.configure(Map.of(), false);
        return converter;
    }

    /** Every file the build bundled from schemas/ and schemas/history/, with the Python side's fingerprint. */
    static Stream<String[]> bundledSchemas() {
        return Arrays.stream(SchemaCatalog.resource("index.txt").split("\n"))
                .filter(line -> !line.isBlank())
                .map(line -> line.split("\t"));
    }

    @Test
    void everySchemaInTheRepositoryIsBundled() {
        long current = bundledSchemas().filter(e -> !e[0].startsWith("history/")).count();
        long history = bundledSchemas().filter(e -> e[0].startsWith("history/")).count();
        assertTrue(current >= 10, "current schemas bundled: " + current);
        assertTrue(history >= 10, "historical schemas bundled: " + history);
    }

    static Stream<Arguments> everyBundledSchema() {
        return bundledSchemas().map(entry -> Arguments.of(entry[0], entry[1]));
    }

    @ParameterizedTest
    @MethodSource("everyBundledSchema")
    void decodesARecordWrittenWithEachSchemaVersion(String path, String pythonFingerprint) throws IOException {
        Schema writer = new Schema.Parser().parse(SchemaCatalog.resource(path));
        assertEquals(pythonFingerprint, littleEndianHex(SchemaCatalog.fingerprint(writer)),
                "Java's CRC-64-AVRO of " + path + " differs from the Python codec's");
        GenericRecord record = (GenericRecord) Samples.datum(writer);
        ByteBuffer framed = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), writer).encode(record);
        SchemaAndValue converted = CONVERTER.toConnectData("sched.any", toArray(framed));
        Struct struct = assertInstanceOf(Struct.class, converted.value());
        struct.validate();
        assertEquals(writer.getFullName(), converted.schema().name());
        for (Schema.Field field : writer.getFields()) {
            Object value = struct.get(field.name());
            if (Samples.nonNull(field.schema()).getType() == Schema.Type.STRING) {
                assertEquals(Samples.STRING, value, field.name());
            }
        }
    }

    @Test
    void mapsOptionalsEnumsTimestampsBytesAndNestedValues() {
        Schema schema = new Schema.Parser().parse("""
                {"type":"record","name":"Probe","namespace":"test.v1","fields":[
                 {"name":"maybe","type":["null","string"],"default":null},
                 {"name":"state","type":{"type":"enum","name":"S","symbols":["ON","OFF"]}},
                 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
                 {"name":"payload","type":"bytes"},
                 {"name":"nested","type":{"type":"record","name":"N","fields":[
                   {"name":"raw","type":"bytes"},{"name":"tags","type":{"type":"array","items":"string"}},
                   {"name":"mode","type":"S"}]}}]}""");
        SchemaCatalog catalog = new SchemaCatalog(Map.of(schema.getFullName(), schema), List.of());
        GenericRecord nested = new GenericData.Record(schema.getField("nested").schema());
        nested.put("raw", ByteBuffer.wrap(new byte[] {0, 1, (byte) 0xff}));
        nested.put("tags", List.of("a\"b", "\u0000"));
        nested.put("mode", new GenericData.EnumSymbol(schema.getField("state").schema(), "OFF"));
        GenericRecord record = new GenericData.Record(schema);
        record.put("maybe", null);
        record.put("state", new GenericData.EnumSymbol(schema.getField("state").schema(), "ON"));
        record.put("at", 1_700_000_000_123L);
        record.put("payload", ByteBuffer.wrap("hi".getBytes(StandardCharsets.UTF_8)));
        record.put("nested", nested);
        SchemaAndValue converted = catalog.decode(encode(schema, record));
        Struct struct = (Struct) converted.value();
        assertTrue(converted.schema().field("maybe").schema().isOptional());
        assertNull(struct.get("maybe"));
        assertEquals("ON", struct.get("state"));
        assertEquals(Timestamp.LOGICAL_NAME, converted.schema().field("at").schema().name());
        assertEquals(new Date(1_700_000_000_123L), struct.get("at"));
        assertEquals("hi", new String((byte[]) struct.get("payload"), StandardCharsets.UTF_8));
        assertEquals("{\"raw\":\"AAH/\",\"tags\":[\"a\\\"b\",\"\\u0000\"],\"mode\":\"OFF\"}", struct.get("nested"));
    }

    @Test
    void aHistoricalVersionIsReadIntoTheCurrentShape() {
        Schema old = new Schema.Parser().parse("""
                {"type":"record","name":"R","namespace":"test.v1","fields":[{"name":"id","type":"string"}]}""");
        Schema now = new Schema.Parser().parse("""
                {"type":"record","name":"R","namespace":"test.v1","fields":[{"name":"id","type":"string"},
                 {"name":"added","type":"long","default":7}]}""");
        SchemaCatalog catalog = new SchemaCatalog(Map.of(now.getFullName(), now), List.of(old));
        GenericRecord record = new GenericData.Record(old);
        record.put("id", "x");
        Struct struct = (Struct) catalog.decode(encode(old, record)).value();
        assertEquals("x", struct.get("id"));
        assertEquals(7L, struct.get("added"));
    }

    @Test
    void badInputIsADataExceptionSayingWhy() {
        byte[] garbage = "not avro".getBytes(StandardCharsets.UTF_8);
        assertTrue(assertThrows(DataException.class, () -> CONVERTER.toConnectData("t", garbage))
                .getMessage().contains("single-object"));
        byte[] unknown = {(byte) 0xC3, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0};
        assertTrue(assertThrows(DataException.class, () -> CONVERTER.toConnectData("t", unknown))
                .getMessage().contains("unknown writer schema fingerprint"));
        String[] first = bundledSchemas().filter(e -> !e[0].startsWith("history/")).findFirst().orElseThrow();
        Schema schema = new Schema.Parser().parse(SchemaCatalog.resource(first[0]));
        byte[] good = encode(schema, (GenericRecord) Samples.datum(schema));
        byte[] truncated = Arrays.copyOf(good, SchemaCatalog.HEADER_SIZE + 1);
        assertThrows(DataException.class, () -> CONVERTER.toConnectData("t", truncated));
        byte[] trailing = Arrays.copyOf(good, good.length + 3);
        assertTrue(assertThrows(DataException.class, () -> CONVERTER.toConnectData("t", trailing))
                .getMessage().contains("trailing"));
    }

    @Test
    void aTombstoneIsNullAndWritingIsRefused() {
        assertEquals(SchemaAndValue.NULL, CONVERTER.toConnectData("t", null));
        assertThrows(DataException.class, () -> CONVERTER.fromConnectData("t", null, null));
        assertNotNull(CONVERTER.version());
    }

    private static byte[] encode(Schema schema, GenericRecord record) {
        try {
            return toArray(new BinaryMessageEncoder<GenericRecord>(GenericData.get(), schema).encode(record));
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    private static byte[] toArray(ByteBuffer buffer) {
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return bytes;
    }

    private static String littleEndianHex(long fingerprint) {
        byte[] bytes = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(fingerprint).array();
        StringBuilder hex = new StringBuilder();
        for (byte b : bytes) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }

    /** A valid datum for any schema: every field set, unions taking their non-null branch. */
    static final class Samples {
        static final String STRING = "sample";

        static Schema nonNull(Schema schema) {
            if (schema.getType() != Schema.Type.UNION) {
                return schema;
            }
            return schema.getTypes().stream().filter(t -> t.getType() != Schema.Type.NULL).findFirst()
                    .orElse(schema.getTypes().get(0));
        }

        static Object datum(Schema schema) {
            Schema single = nonNull(schema);
            return switch (single.getType()) {
                case RECORD -> {
                    GenericRecord record = new GenericData.Record(single);
                    for (Schema.Field field : single.getFields()) {
                        record.put(field.pos(), datum(field.schema()));
                    }
                    yield record;
                }
                case ENUM -> new GenericData.EnumSymbol(single, single.getEnumSymbols().get(0));
                case ARRAY -> new ArrayList<>(List.of(datum(single.getElementType())));
                case MAP -> Map.of("k", datum(single.getValueType()));
                case STRING -> STRING;
                case BYTES -> ByteBuffer.wrap(new byte[] {0, 1, 2});
                case FIXED -> new GenericData.Fixed(single, new byte[single.getFixedSize()]);
                case INT -> 3;
                case LONG -> 1_700_000_000_000L;
                case FLOAT -> 1.5f;
                case DOUBLE -> 2.5d;
                case BOOLEAN -> true;
                case NULL -> null;
                case UNION -> throw new AssertionError("nested union in " + schema);
            };
        }
    }
}
