package shoal.ycsb;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

class RecordCodecTest {
  private static byte[] s(String x) {
    return x.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void layoutIsTheDocumentedOne() {
    Map<String, byte[]> m = new HashMap<>();
    m.put("f1", s("xy"));
    m.put("f0", new byte[0]);
    // count 2; "f0" (len 2) value len 0; "f1" value len 2 "xy": names ascending.
    byte[] want = {2, 0, 0, 0, 2, 0, 'f', '0', 0, 0, 0, 0, 2, 0, 'f', '1', 2, 0, 0, 0, 'x', 'y'};
    assertArrayEquals(want, RecordCodec.encode(m));
  }

  @Test
  void roundTripAndFieldSelection() {
    Map<String, byte[]> m = new TreeMap<>();
    for (int i = 0; i < 10; i++) {
      byte[] v = new byte[100];
      for (int j = 0; j < v.length; j++) {
        v[j] = (byte) (i * 7 + j);
      }
      m.put("field" + i, v);
    }
    m.put("é", s("unicode name"));
    byte[] enc = RecordCodec.encode(m);
    Map<String, byte[]> back = RecordCodec.decode(enc);
    assertEquals(m.keySet(), back.keySet());
    for (String k : m.keySet()) {
      assertArrayEquals(m.get(k), back.get(k), k);
    }
    Map<String, byte[]> some = RecordCodec.decode(enc, Set.of("field3", "nope"));
    assertEquals(Set.of("field3"), some.keySet());
    assertArrayEquals(m.get("field3"), some.get("field3"));
    assertEquals(0, RecordCodec.decode(RecordCodec.encode(Map.of())).size());
  }

  @Test
  void refusesMalformedRecords() {
    byte[] enc = RecordCodec.encode(Map.of("a", s("1"), "b", s("2")));
    // Truncated.
    assertThrows(IllegalArgumentException.class, () -> RecordCodec.decode(java.util.Arrays.copyOf(enc, enc.length - 1)));
    // Trailing byte.
    assertThrows(IllegalArgumentException.class, () -> RecordCodec.decode(java.util.Arrays.copyOf(enc, enc.length + 1)));
    // A count the record cannot hold.
    byte[] big = enc.clone();
    big[3] = 0x7f;
    assertThrows(IllegalArgumentException.class, () -> RecordCodec.decode(big));
    // The same name twice.
    byte[] dup = {2, 0, 0, 0, 1, 0, 'a', 0, 0, 0, 0, 1, 0, 'a', 0, 0, 0, 0};
    assertThrows(IllegalArgumentException.class, () -> RecordCodec.decode(dup));
  }
}
