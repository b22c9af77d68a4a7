package shoal.ycsb;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * A YCSB record (field name to bytes) as one value (docs/ycsb.md, "Record
 * encoding"). All integers little-endian:
 *
 * <pre>
 *   record := count u32 | field * count
 *   field  := name length u16 | name (UTF-8) | value length u32 | value
 * </pre>
 *
 * Fields are written in ascending order of name, each name once, so equal
 * records encode to equal bytes. A decoder refuses duplicate names,
 * lengths past the end and trailing bytes.
 */
public final class RecordCodec {
  private RecordCodec() {}

  public static byte[] encode(Map<String, byte[]> fields) {
    TreeMap<String, byte[]> sorted = new TreeMap<>(fields);
    int size = 4;
    TreeMap<String, byte[]> names = new TreeMap<>();
    for (Map.Entry<String, byte[]> e : sorted.entrySet()) {
      byte[] n = e.getKey().getBytes(StandardCharsets.UTF_8);
      if (n.length > 0xffff) {
        throw new IllegalArgumentException("field name longer than 65535 bytes");
      }
      names.put(e.getKey(), n);
      size += 2 + n.length + 4 + e.getValue().length;
    }
    ByteBuffer b = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
    b.putInt(sorted.size());
    for (Map.Entry<String, byte[]> e : sorted.entrySet()) {
      byte[] n = names.get(e.getKey());
      b.putShort((short) n.length).put(n);
      b.putInt(e.getValue().length).put(e.getValue());
    }
    return b.array();
  }

  /** Every field of the record. */
  public static Map<String, byte[]> decode(byte[] record) {
    return decode(record, null);
  }

  /** The fields of the record named in {@code wanted} (all when null). */
  public static Map<String, byte[]> decode(byte[] record, Set<String> wanted) {
    ByteBuffer b = ByteBuffer.wrap(record).order(ByteOrder.LITTLE_ENDIAN);
    TreeMap<String, byte[]> out = new TreeMap<>();
    try {
      long count = Integer.toUnsignedLong(b.getInt());
      if (count * 6 > b.remaining()) {
        throw new IllegalArgumentException("record: count " + count + " larger than the record could hold");
      }
      for (long i = 0; i < count; i++) {
        int nl = b.getShort() & 0xffff;
        String name = utf8(take(b, nl));
        long vl = Integer.toUnsignedLong(b.getInt());
        if (vl > b.remaining()) {
          throw new IllegalArgumentException("record: value length " + vl + " past the end");
        }
        byte[] v = take(b, (int) vl);
        if (wanted == null || wanted.contains(name)) {
          if (out.put(name, v) != null) {
            throw new IllegalArgumentException("record: field " + name + " twice");
          }
        }
      }
    } catch (BufferUnderflowException e) {
      throw new IllegalArgumentException("record: truncated");
    }
    if (b.hasRemaining()) {
      throw new IllegalArgumentException("record: " + b.remaining() + " trailing bytes");
    }
    return out;
  }

  private static byte[] take(ByteBuffer b, int n) {
    if (n > b.remaining()) {
      throw new IllegalArgumentException("record: length " + n + " past the end");
    }
    byte[] out = new byte[n];
    b.get(out);
    return out;
  }

  private static String utf8(byte[] b) {
    try {
      return StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(b))
          .toString();
    } catch (CharacterCodingException e) {
      throw new IllegalArgumentException("record: field name is not UTF-8");
    }
  }
}
