package shoal.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The Java client against the test vectors of docs/wire-format.md ("Test
 * vectors"), read from the document: each request must encode to the
 * documented bytes, and each response must decode to what its row says.
 * Every row of the table must be checked, so a vector added to the document
 * fails here until the client handles it.
 */
class WireVectorsTest {
  private static byte[] s(String x) {
    return x.getBytes(StandardCharsets.UTF_8);
  }

  /** What each documented message is, by the start of its row's label. */
  private interface Check {
    void check(byte[] bytes) throws Exception;
  }

  private static Map<String, Check> checks() {
    Map<String, Check> m = new LinkedHashMap<>();
    m.put("PING request, id 1", b -> assertArrayEquals(b, Wire.ping(1)));
    m.put("READ request, id 2, table 7, key `k`", b -> assertArrayEquals(b, Wire.read(2, 7, s("k"), RejectRules.NONE)));
    m.put("WRITE request, id 3, table 7, key `k`, value `v1`, only if version is 5",
        b -> assertArrayEquals(b, Wire.write(3, 7, s("k"), s("v1"), RejectRules.versionIs(5))));
    m.put("INCREMENT request, id 4, table 1, key `n`, delta -2",
        b -> assertArrayEquals(b, Wire.increment(4, 1, s("n"), -2, RejectRules.NONE)));
    m.put("MULTI_READ request, id 5, table 1, keys `a` and `bc`",
        b -> assertArrayEquals(b, Wire.multiRead(5, List.of(new Wire.ReadItem(1, s("a")), new Wire.ReadItem(1, s("bc"))))));
    m.put("ENUMERATE request, id 6, table 3, cursor 0, max 100", b -> assertArrayEquals(b, Wire.enumerate(6, 3, 0, 100)));
    m.put("CREATE_TABLE request, id 7, name `users`", b -> assertArrayEquals(b, Wire.createTable(7, "users")));
    m.put("READ response, id 2, version 9, value `hello`", b -> {
      Response r = Response.decode(b);
      assertEquals(Wire.READ, r.opcode());
      assertEquals(2, r.requestId());
      assertTrue(r.ok());
      assertEquals(9, r.readResult().version());
      assertArrayEquals(s("hello"), r.readResult().value());
    });
    m.put("WRITE response WRONG_VERSION, id 3, current version 6", b -> {
      Response r = Response.decode(b);
      assertEquals(Wire.WRITE, r.opcode());
      assertEquals(3, r.requestId());
      assertEquals(Status.WRONG_VERSION, r.status());
      assertEquals(6, r.detail().a());
      StatusException e = assertThrows(StatusException.class, r::requireOk);
      assertEquals(Status.WRONG_VERSION, e.status());
    });
    m.put("MULTI_READ response, id 5", b -> {
      Response r = Response.decode(b);
      assertEquals(5, r.requestId());
      List<Response.Item<Response.Versioned>> items = r.multiReadResult();
      assertEquals(2, items.size());
      assertEquals(Status.OK, items.get(0).status());
      assertEquals(3, items.get(0).result().version());
      assertArrayEquals(s("x"), items.get(0).result().value());
      assertEquals(Status.OBJECT_DOESNT_EXIST, items.get(1).status());
      assertNull(items.get(1).result());
    });
    m.put("ENUMERATE response, id 6", b -> {
      Response r = Response.decode(b);
      assertEquals(6, r.requestId());
      Response.Page p = r.page();
      assertTrue(p.more());
      assertEquals(0x100, p.nextCursor());
      assertEquals(1, p.objects().size());
      assertEquals(2, p.objects().get(0).version());
      assertArrayEquals(s("k"), p.objects().get(0).key());
      assertArrayEquals(s("v"), p.objects().get(0).value());
    });
    m.put("CREATE_TABLE response, id 7, table 4", b -> {
      Response r = Response.decode(b);
      assertEquals(7, r.requestId());
      assertEquals(4, r.tableId());
    });
    m.put("STATS response, id 8", b -> {
      Response r = Response.decode(b);
      assertEquals(8, r.requestId());
      Map<String, Number> st = r.statsResult();
      assertEquals(List.of("objects", "log_utilisation"), List.copyOf(st.keySet()));
      assertEquals(3L, st.get("objects"));
      assertEquals(0.5, st.get("log_utilisation"));
    });
    m.put("READ response UNKNOWN_TABLE, id 9, table 42", b -> {
      Response r = Response.decode(b);
      assertEquals(9, r.requestId());
      assertEquals(Status.UNKNOWN_TABLE, r.status());
      assertEquals(42, r.detail().a());
    });
    m.put("AUTH request, id 10, user `default`, password `s3cret`",
        b -> assertArrayEquals(b, Wire.auth(10, s("default"), s("s3cret"))));
    m.put("AUTH response, id 10", b -> {
      Response r = Response.decode(b);
      assertEquals(Wire.AUTH, r.opcode());
      assertEquals(10, r.requestId());
      r.requireOk().empty();
    });
    m.put("AUTH response AUTH_FAILED, id 10", b -> {
      Response r = Response.decode(b);
      assertEquals(Status.AUTH_FAILED, r.status());
      assertTrue(r.detail().isEmpty());
    });
    m.put("READ response NOT_AUTHENTICATED, id 11", b -> {
      Response r = Response.decode(b);
      assertEquals(11, r.requestId());
      assertEquals(Status.NOT_AUTHENTICATED, r.status());
    });
    m.put("WRITE_TTL request, id 12, table 7, key `k`, value `v`, ttl 60000 ms",
        b -> assertArrayEquals(b, Wire.writeTtl(12, 7, s("k"), s("v"), 60000, RejectRules.NONE)));
    m.put("WRITE_TTL response, id 12, version 3", b -> {
      Response r = Response.decode(b);
      assertEquals(12, r.requestId());
      assertEquals(3, r.version());
    });
    m.put("READ_TTL request, id 13, table 7, key `k`", b -> assertArrayEquals(b, Wire.readTtl(13, 7, s("k"), RejectRules.NONE)));
    m.put("READ_TTL response, id 13, version 3, expires at 1700000060000, 59000 ms left", b -> {
      Response.Ttl t = Response.decode(b).ttlResult();
      assertEquals(new Response.Ttl(3, 1700000060000L, 59000), t);
    });
    m.put("READ_TTL response, id 14, version 2, no expiry", b -> {
      Response r = Response.decode(b);
      assertEquals(14, r.requestId());
      assertEquals(new Response.Ttl(2, 0, 0), r.ttlResult());
    });
    // The chunk operations (docs/chunks.md) are not spoken by this client,
    // which YCSB uses for key-value tables only: their vectors are checked
    // as frames (magic, version, opcode, direction, request id, length).
    m.put("CREATE_CHUNK_TABLE request, id 15, name `graph`", frame(21, 15, false));
    m.put("CHUNK_CREATE request, id 16, table 5, payloads `ab` and empty", frame(12, 16, false));
    m.put("CHUNK_CREATE response, id 16, chunks 0x1000000000001 and 0x1000000000002", frame(12, 16, true));
    m.put("CHUNK_GET request, id 17, table 5, chunk 0x1000000000001", frame(13, 17, false));
    m.put("CHUNK_GET response, id 17", frame(13, 17, true));
    m.put("CHUNK_PUT request, id 18, table 5, chunk 0x1000000000001, payload `xyz`", frame(14, 18, false));
    m.put("CHUNK_REMOVE response, id 19", frame(15, 19, true));
    // Nor are the stream operations (docs/streams.md).
    m.put("CREATE_STREAM request, id 20, name `clicks`", frame(22, 20, false));
    m.put("CREATE_STREAM response, id 20", frame(22, 20, true));
    m.put("PRODUCE request, id 21", frame(23, 21, false));
    m.put("PRODUCE response, id 21", frame(23, 21, true));
    m.put("CONSUME request, id 22", frame(24, 22, false));
    m.put("CONSUME response, id 22", frame(24, 22, true));
    m.put("DESCRIBE_STREAM request, id 23", frame(25, 23, false));
    m.put("DESCRIBE_STREAM response, id 23", frame(25, 23, true));
    // Nor are the chunk locks (docs/chunks.md, "Locks").
    m.put("CHUNK_LOCK request, id 24", frame(27, 24, false));
    m.put("CHUNK_LOCK response, id 24", frame(27, 24, true));
    m.put("CHUNK_LOCK response, id 25", frame(27, 25, true));
    m.put("CHUNK_UNLOCK request, id 26", frame(28, 26, false));
    m.put("CHUNK_UNLOCK response, id 26", frame(28, 26, true));
    m.put("CHUNK_RENEW request, id 27", frame(29, 27, false));
    m.put("CHUNK_RENEW response, id 27", frame(29, 27, true));
    m.put("CHUNK_PUT_LOCKED request, id 28", frame(30, 28, false));
    m.put("CHUNK_PUT_LOCKED response, id 28", frame(30, 28, true));
    m.put("CHUNK_LOCK response, id 29", frame(27, 29, true));
    m.put("CHUNK_LOCK response, id 30: owner limit", b -> {
      frame(27, 30, true).check(b);
      Response r = Response.decode(b);
      assertEquals(Status.LOCK_OWNER_LIMIT, r.status());
      assertEquals("LOCK_OWNER_LIMIT", Status.name(r.status()));
      assertEquals(10000, r.detail().a());
    });
    // Nor are the consumer names (docs/streams.md, "Consumer names").
    m.put("CLAIM_GROUP request, id 31", frame(31, 31, false));
    m.put("CLAIM_GROUP response, id 31", frame(31, 31, true));
    m.put("CLAIM_GROUP response, id 32", frame(31, 32, true));
    m.put("CONSUME_CLAIMED request, id 33", frame(32, 33, false));
    m.put("CONSUME_CLAIMED response, id 33", frame(32, 33, true));
    m.put("COMMIT_GROUP request, id 34", frame(33, 34, false));
    m.put("COMMIT_GROUP response, id 34", frame(33, 34, true));
    return m;
  }

  /** A frame of an operation this client does not speak: its header only. */
  private static Check frame(int opcode, long id, boolean response) {
    return b -> {
      assertTrue(b.length >= Wire.HEADER_BYTES, "a frame has a 16-byte header");
      java.nio.ByteBuffer h = java.nio.ByteBuffer.wrap(b).order(java.nio.ByteOrder.LITTLE_ENDIAN);
      assertEquals(Wire.MAGIC, h.get() & 0xff);
      assertEquals(Wire.VERSION, h.get() & 0xff);
      assertEquals(opcode, h.get() & 0xff);
      assertEquals(response ? Wire.FLAG_RESPONSE : 0, h.get() & 0xff);
      assertEquals(id, h.getLong());
      assertEquals(b.length - Wire.HEADER_BYTES, h.getInt());
      if (response) {
        Response r = Response.decode(b);
        assertEquals(opcode, r.opcode());
        assertEquals(id, r.requestId());
      }
    };
  }

  @Test
  void everyDocumentedVectorMatches() throws Exception {
    List<String[]> rows = Docs.table("## Test vectors");
    assertTrue(rows.size() >= 20, "the test vector table has " + rows.size() + " rows");
    Map<String, Check> checks = checks();
    Set<String> used = new HashSet<>();
    for (String[] row : rows) {
      String label = row[0];
      byte[] bytes = Docs.hex(row[1]);
      Check c = null;
      String key = null;
      for (Map.Entry<String, Check> e : checks.entrySet()) {
        // The longest label prefix that matches (so "AUTH response, id 10" does not take the AUTH_FAILED row).
        if ((label.equals(e.getKey()) || label.startsWith(e.getKey() + ":")) && (key == null || e.getKey().length() > key.length())) {
          c = e.getValue();
          key = e.getKey();
        }
      }
      if (c == null) {
        fail("no check for the documented vector: " + label);
      }
      try {
        c.check(bytes);
      } catch (AssertionError | Exception e) {
        throw new AssertionError("vector \"" + label + "\": " + e.getMessage(), e);
      }
      used.add(key);
    }
    for (String k : checks.keySet()) {
      assertTrue(used.contains(k), "the document no longer has the vector: " + k);
    }
  }

  @Test
  void decoderRefusesWhatTheFormatForbids() throws Exception {
    byte[] ok = Wire.read(2, 7, s("k"), RejectRules.NONE);
    // A request is not a response (flags bit 0 clear).
    assertThrows(ProtocolException.class, () -> Response.decode(ok));
    byte[] resp = Docs.hex("53 01 02 01 02 00 00 00 00 00 00 00 12 00 00 00 00 09 00 00 00 00 00 00 00 05 00 00 00 68 65 6c 6c 6f");
    Response.decode(resp);
    byte[] badMagic = resp.clone();
    badMagic[0] = 0x54;
    assertThrows(ProtocolException.class, () -> Response.decode(badMagic));
    byte[] badVersion = resp.clone();
    badVersion[1] = 2;
    assertThrows(ProtocolException.class, () -> Response.decode(badVersion));
    byte[] reserved = resp.clone();
    reserved[3] = 3;
    assertThrows(ProtocolException.class, () -> Response.decode(reserved));
    // A value length past the body.
    byte[] longValue = resp.clone();
    longValue[25] = 6;
    assertThrows(ProtocolException.class, () -> Response.decode(longValue).readResult());
    // A trailing byte after the result.
    byte[] trailing = java.util.Arrays.copyOf(resp, resp.length + 1);
    trailing[12] = 0x13;
    assertThrows(ProtocolException.class, () -> Response.decode(trailing).readResult());
    // A body over the limit is refused from the header alone.
    assertThrows(ProtocolException.class, () -> Response.header(resp, 10));
    // An enumerate count larger than the body could hold.
    byte[] en = Docs.hex("53 01 09 01 06 00 00 00 00 00 00 00 0e 00 00 00 00 00 00 00 00 00 00 00 00 00 ff ff ff 7f");
    assertThrows(ProtocolException.class, () -> Response.decode(en).page());
    // The result of another operation is not read as this one's.
    assertThrows(ProtocolException.class, () -> Response.decode(resp).page());
  }

  @Test
  void statusDetailsDecode() throws Exception {
    // RETRY with a delay of 2500 us; MALFORMED_REQUEST with a reason.
    Response retry = Response.decode(Docs.hex("53 01 02 01 01 00 00 00 00 00 00 00 05 00 00 00 0c c4 09 00 00"));
    assertEquals(Status.RETRY, retry.status());
    assertEquals(2500, retry.detail().a());
    Response bad = Response.decode(Docs.hex("53 01 02 01 01 00 00 00 00 00 00 00 06 00 00 00 10 03 00 61 62 63"));
    assertEquals("abc", bad.detail().reason());
    Response big = Response.decode(Docs.hex("53 01 03 01 01 00 00 00 00 00 00 00 09 00 00 00 03 00 00 20 00 00 00 10 00"));
    assertEquals(Status.VALUE_TOO_LARGE, big.status());
    assertEquals(0x200000, big.detail().a());
    assertEquals(0x100000, big.detail().b());
    assertFalse(big.ok());
    assertNotNull(assertThrows(StatusException.class, big::requireOk).getMessage());
    // A status detail cut short.
    assertThrows(ProtocolException.class,
        () -> Response.decode(Docs.hex("53 01 03 01 01 00 00 00 00 00 00 00 03 00 00 00 06 01 02")));
  }
}
