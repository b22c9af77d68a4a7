package shoal.ycsb;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import site.ycsb.ByteArrayByteIterator;
import site.ycsb.ByteIterator;

/** Conversions between YCSB's field maps and byte arrays, shared by the bindings. */
final class Fields {
  private Fields() {}

  static Map<String, byte[]> toBytes(Map<String, ByteIterator> values) {
    Map<String, byte[]> out = new TreeMap<>();
    for (Map.Entry<String, ByteIterator> e : values.entrySet()) {
      out.put(e.getKey(), e.getValue().toArray());
    }
    return out;
  }

  /** Puts the fields of {@code decoded} named in {@code wanted} (all when null) into {@code result}. */
  static void fill(Map<String, byte[]> decoded, Set<String> wanted, Map<String, ByteIterator> result) {
    for (Map.Entry<String, byte[]> e : decoded.entrySet()) {
      if (wanted == null || wanted.contains(e.getKey())) {
        result.put(e.getKey(), new ByteArrayByteIterator(e.getValue()));
      }
    }
  }

  static HashMap<String, ByteIterator> toIterators(Map<String, byte[]> decoded, Set<String> wanted) {
    HashMap<String, ByteIterator> out = new HashMap<>();
    fill(decoded, wanted, out);
    return out;
  }
}
