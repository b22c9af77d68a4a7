package shoal.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

class KeyHashTest {
  /** The "Key hash" table of docs/wire-format.md, read from the document. */
  @Test
  void documentedKeyHashes() throws Exception {
    List<String[]> rows = Docs.table("## Key hash");
    assertTrue(rows.size() >= 6, "key hash table has " + rows.size() + " rows");
    Pattern power = Pattern.compile("^(\\d+)\\^(\\d+)$");
    Pattern backticked = Pattern.compile("`([^`]*)`");
    Pattern slot = Pattern.compile("\\(slot (\\d+)\\)");
    for (String[] row : rows) {
      String t = row[0].replace("(slot-hashed)", "").trim();
      Matcher pm = power.matcher(t);
      long table = pm.matches()
          ? BigInteger.valueOf(Long.parseLong(pm.group(1))).pow(Integer.parseInt(pm.group(2))).longValueExact()
          : Long.parseLong(t);
      assertEquals(row[0].contains("slot-hashed"), (table & KeyHash.SLOT_HASHED) != 0, row[0]);
      byte[] key;
      Matcher km = backticked.matcher(row[1]);
      if (row[1].equals("(empty)")) {
        key = new byte[0];
      } else if (!km.find()) {
        throw new AssertionError("cannot read the key of " + row[1]);
      } else if (row[1].contains("bytes)")) {
        key = Docs.hex(km.group(1));
      } else {
        key = km.group(1).getBytes(StandardCharsets.UTF_8);
      }
      Matcher sm = slot.matcher(row[1]);
      if (sm.find()) {
        assertEquals(Integer.parseInt(sm.group(1)), KeyHash.keySlot(key), "slot of " + row[1]);
      }
      long want = Long.parseUnsignedLong(row[2].replace("`", "").replace("0x", ""), 16);
      assertEquals(Long.toHexString(want), Long.toHexString(KeyHash.of(table, key)), row[0] + " / " + row[1]);
    }
  }

  /** XXH3-64 of every length class, against Python's xxhash (src/test/resources/gen_xxh3_vectors.py). */
  @Test
  void xxh3MatchesTheReferenceLibrary() throws Exception {
    int n = 0;
    try (BufferedReader r = new BufferedReader(new InputStreamReader(
        KeyHashTest.class.getResourceAsStream("/xxh3_vectors.txt"), StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        if (line.startsWith("#") || line.isBlank()) {
          continue;
        }
        String[] f = line.trim().split(" ");
        int len = Integer.parseInt(f[0]);
        byte[] in = new byte[len];
        for (int i = 0; i < len; i++) {
          in[i] = (byte) ((i * 31 + 7) % 251);
        }
        assertEquals(f[1], String.format("%016x", KeyHash.xxh3(in)), "length " + len);
        n++;
      }
    }
    assertTrue(n >= 20, "only " + n + " vectors");
  }

  /** Redis Cluster's documented slots (CLUSTER KEYSLOT) and hash-tag rules. */
  @Test
  void keySlots() {
    assertEquals(12182, KeyHash.keySlot("foo".getBytes(StandardCharsets.UTF_8)));
    assertEquals(KeyHash.keySlot("user1000".getBytes(StandardCharsets.UTF_8)),
        KeyHash.keySlot("{user1000}.following".getBytes(StandardCharsets.UTF_8)));
    // An empty tag "{}" hashes the whole key.
    assertEquals(KeyHash.crc16Xmodem("a{}b".getBytes(StandardCharsets.UTF_8), 0, 4) % 16384,
        KeyHash.keySlot("a{}b".getBytes(StandardCharsets.UTF_8)));
    // CRC-16/XMODEM's check value: "123456789" -> 0x31c3.
    assertEquals(0x31c3, KeyHash.crc16Xmodem("123456789".getBytes(StandardCharsets.UTF_8), 0, 9));
  }
}
