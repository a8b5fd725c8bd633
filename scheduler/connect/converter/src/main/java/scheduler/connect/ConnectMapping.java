package scheduler.connect;

import java.nio.ByteBuffer;
import java.util.Base64;
import java.util.Collection;
import java.util.Date;
import java.util.List;
import java.util.Map;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Timestamp;

/**
 * An Avro record schema as a flat Connect struct, one column per top-level field.
 *
 * ["null", T] is an optional T; enums are their symbols; timestamp logical types are Connect
 * Timestamps; bytes stay bytes. Nested records, arrays, maps and other unions become JSON text
 * (Avro field names, enum symbols, union values untagged, bytes as base64): a relational sink
 * stores them in one text column, and Avro's own JSON rendering of bytes (\u0000 escapes) is
 * refused by PostgreSQL.
 */
final class ConnectMapping {
    private final org.apache.avro.Schema avro;
    private final Schema connect;

    ConnectMapping(org.apache.avro.Schema avro) {
        this.avro = avro;
        SchemaBuilder builder = SchemaBuilder.struct().name(avro.getFullName());
        for (org.apache.avro.Schema.Field field : avro.getFields()) {
            builder.field(field.name(), column(field.schema()));
        }
        this.connect = builder.build();
    }

    Schema connectSchema() {
        return connect;
    }

    SchemaAndValue toConnect(GenericRecord record) {
        Struct struct = new Struct(connect);
        for (org.apache.avro.Schema.Field field : avro.getFields()) {
            struct.put(field.name(), value(field.schema(), record.get(field.pos())));
        }
        return new SchemaAndValue(connect, struct);
    }

    static Schema column(org.apache.avro.Schema schema) {
        org.apache.avro.Schema single = nonNullBranch(schema);
        boolean optional = single != schema || isNullableUnion(schema);
        SchemaBuilder builder = switch (kind(single)) {
            case STRING, JSON -> SchemaBuilder.string();
            case BOOLEAN -> SchemaBuilder.bool();
            case INT -> SchemaBuilder.int32();
            case LONG -> SchemaBuilder.int64();
            case FLOAT -> SchemaBuilder.float32();
            case DOUBLE -> SchemaBuilder.float64();
            case BYTES -> SchemaBuilder.bytes();
            case TIMESTAMP -> Timestamp.builder();
        };
        return optional ? builder.optional().build() : builder.build();
    }

    static Object value(org.apache.avro.Schema schema, Object datum) {
        if (datum == null) {
            return null;
        }
        org.apache.avro.Schema single = nonNullBranch(schema);
        return switch (kind(single)) {
            case STRING -> datum.toString();
            case BOOLEAN, INT, LONG, FLOAT, DOUBLE -> datum;
            case BYTES -> bytes(datum);
            case TIMESTAMP -> new Date(millis(single.getLogicalType(), (Long) datum));
            case JSON -> json(datum, new StringBuilder()).toString();
        };
    }

    private enum Kind { STRING, BOOLEAN, INT, LONG, FLOAT, DOUBLE, BYTES, TIMESTAMP, JSON }

    private static Kind kind(org.apache.avro.Schema schema) {
        LogicalType logical = schema.getLogicalType();
        if (logical instanceof LogicalTypes.TimestampMillis || logical instanceof LogicalTypes.TimestampMicros) {
            return Kind.TIMESTAMP;
        }
        return switch (schema.getType()) {
            case STRING, ENUM -> Kind.STRING;
            case BOOLEAN -> Kind.BOOLEAN;
            case INT -> Kind.INT;
            case LONG -> Kind.LONG;
            case FLOAT -> Kind.FLOAT;
            case DOUBLE -> Kind.DOUBLE;
            case BYTES, FIXED -> Kind.BYTES;
            default -> Kind.JSON; // RECORD, ARRAY, MAP, UNION of several, NULL
        };
    }

    private static long millis(LogicalType logical, long value) {
        return logical instanceof LogicalTypes.TimestampMicros ? Math.floorDiv(value, 1000L) : value;
    }

    /** T for ["null", T] (either order), else the schema itself. */
    private static org.apache.avro.Schema nonNullBranch(org.apache.avro.Schema schema) {
        if (schema.getType() != org.apache.avro.Schema.Type.UNION || schema.getTypes().size() != 2) {
            return schema;
        }
        List<org.apache.avro.Schema> types = schema.getTypes();
        if (types.get(0).getType() == org.apache.avro.Schema.Type.NULL) {
            return types.get(1);
        }
        return types.get(1).getType() == org.apache.avro.Schema.Type.NULL ? types.get(0) : schema;
    }

    private static boolean isNullableUnion(org.apache.avro.Schema schema) {
        return schema.getType() == org.apache.avro.Schema.Type.UNION
                && schema.getTypes().stream().anyMatch(t -> t.getType() == org.apache.avro.Schema.Type.NULL);
    }

    private static byte[] bytes(Object datum) {
        if (datum instanceof GenericFixed fixed) {
            return fixed.bytes().clone();
        }
        ByteBuffer buffer = ((ByteBuffer) datum).duplicate();
        byte[] copy = new byte[buffer.remaining()];
        buffer.get(copy);
        return copy;
    }

    static StringBuilder json(Object datum, StringBuilder out) {
        if (datum == null) {
            return out.append("null");
        }
        if (datum instanceof GenericRecord record) {
            out.append('{');
            boolean first = true;
            for (org.apache.avro.Schema.Field field : record.getSchema().getFields()) {
                out.append(first ? "" : ",");
                first = false;
                quote(field.name(), out).append(':');
                json(record.get(field.pos()), out);
            }
            return out.append('}');
        }
        if (datum instanceof Map<?, ?> map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> item : map.entrySet()) {
                out.append(first ? "" : ",");
                first = false;
                quote(item.getKey().toString(), out).append(':');
                json(item.getValue(), out);
            }
            return out.append('}');
        }
        if (datum instanceof Collection<?> items) {
            out.append('[');
            boolean first = true;
            for (Object item : items) {
                out.append(first ? "" : ",");
                first = false;
                json(item, out);
            }
            return out.append(']');
        }
        if (datum instanceof ByteBuffer || datum instanceof GenericFixed) {
            return quote(Base64.getEncoder().encodeToString(bytes(datum)), out);
        }
        if (datum instanceof Boolean || datum instanceof Integer || datum instanceof Long) {
            return out.append(datum);
        }
        if (datum instanceof Float || datum instanceof Double) {
            double number = ((Number) datum).doubleValue();
            return Double.isFinite(number) ? out.append(datum) : quote(datum.toString(), out);
        }
        return quote(datum.toString(), out); // strings (Utf8) and enum symbols
    }

    private static StringBuilder quote(String text, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"');
    }
}
