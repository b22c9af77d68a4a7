package shoal.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.Vector;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import shoal.ycsb.ShoalDB;
import site.ycsb.ByteIterator;
import site.ycsb.StringByteIterator;

/**
 * Against a real cluster: the coordinator named by the environment variable
 * SHOAL_COORDINATOR (scripts/ycsb-smoke starts a `shoal local` of 3 servers
 * and sets it). Without it these tests are skipped.
 */
class ClusterTest {
  private static InetSocketAddress coordinator;

  @BeforeAll
  static void cluster() {
    String c = System.getenv("SHOAL_COORDINATOR");
    assumeTrue(c != null && !c.isEmpty(), "SHOAL_COORDINATOR not set: no cluster to test against");
    coordinator = Coordinator.parseAddr(c);
  }

  /**
   * Drops the table and checks that it is gone. The server may answer the
   * drop UNKNOWN_TABLE_NAME although the coordinator dropped it (its map
   * sync can remove the name first): only the outcome is checked.
   */
  private static void dropAndCheck(ShoalClient c, String name) throws Exception {
    try {
      c.dropTable(name);
    } catch (StatusException e) {
      assertEquals(Status.UNKNOWN_TABLE_NAME, e.status());
    }
    try (ShoalClient fresh = ShoalClient.cluster(coordinator, 10_000)) {
      assertEquals(Status.UNKNOWN_TABLE_NAME, assertThrows(StatusException.class, () -> fresh.tableId(name)).status());
    }
  }

  private static byte[] s(String x) {
    return ShoalClient.utf8(x);
  }

  @Test
  void readWriteRemoveAndRejectRulesAcrossTablets() throws Exception {
    try (ShoalClient c = ShoalClient.cluster(coordinator, 10_000)) {
      long t = c.createTable("java-client-test");
      assertEquals(t, c.createTable("java-client-test"));
      Set<InetSocketAddress> masters = new HashSet<>();
      for (TabletMap.Tablet tablet : c.tabletMap().tablets()) {
        if (tablet.table() == t) {
          masters.add(tablet.server());
        }
      }
      assertTrue(masters.size() >= 2, "the table's tablets are on " + masters.size() + " server(s)");
      Map<String, Long> versions = new HashMap<>();
      for (int i = 0; i < 300; i++) {
        versions.put("k" + i, c.write(t, s("k" + i), s("v" + i)));
      }
      // A server may answer the first requests for a new table UNKNOWN_TABLE
      // or UNKNOWN_TABLET until the coordinator's map reaches it (the client
      // then refreshes and retries); once every server took writes, no
      // request goes to a server that does not own its key.
      long refreshesBefore = c.refreshes();
      for (int i = 0; i < 300; i++) {
        Response.Versioned v = c.read(t, s("k" + i));
        assertArrayEquals(s("v" + i), v.value());
        assertEquals((long) versions.get("k" + i), v.version());
      }
      // Compare-and-swap: the right version wins, a stale one is WRONG_VERSION.
      long v0 = versions.get("k0");
      long v1 = c.write(t, s("k0"), s("new"), RejectRules.versionIs(v0));
      assertTrue(Long.compareUnsigned(v1, v0) > 0);
      StatusException stale = assertThrows(StatusException.class,
          () -> c.write(t, s("k0"), s("lost"), RejectRules.versionIs(v0)));
      assertEquals(Status.WRONG_VERSION, stale.status());
      assertEquals(v1, stale.detail().a());
      assertEquals(Status.OBJECT_DOESNT_EXIST, assertThrows(StatusException.class,
          () -> c.write(t, s("missing"), s("x"), RejectRules.versionIs(1))).status());
      assertEquals(v1, c.remove(t, s("k0")));
      assertNull(c.read(t, s("k0")));
      assertEquals(0, c.remove(t, s("k0")));
      assertEquals(refreshesBefore, c.refreshes(), "a request went to a server that did not own its key");
      // The whole table, page by page from cursor 0 across the tablets: each object once.
      Set<String> seen = new HashSet<>();
      long cursor = 0;
      for (int page = 0; page < 1000; page++) {
        Response.Page p = c.enumerate(t, cursor, 50);
        for (Response.EnumObject o : p.objects()) {
          assertTrue(seen.add(new String(o.key(), java.nio.charset.StandardCharsets.UTF_8)), "enumerated twice");
        }
        if (!p.more()) {
          break;
        }
        cursor = p.nextCursor();
      }
      assertEquals(299, seen.size());
      dropAndCheck(c, "java-client-test");
    }
  }

  @Test
  void aWrongMapIsRefreshedOnUnknownTablet() throws Exception {
    long t;
    TabletMap right;
    try (ShoalClient c = ShoalClient.cluster(coordinator, 10_000)) {
      t = c.createTable("java-client-routing");
      right = ShoalClient.cluster(coordinator, 10_000).tabletMap();
    }
    // Every tablet of the table sent to one server: most keys go to the wrong one first.
    InetSocketAddress one = right.tablets().get(0).server();
    List<TabletMap.Tablet> wrong = new ArrayList<>();
    for (TabletMap.Tablet tablet : right.tablets()) {
      wrong.add(new TabletMap.Tablet(tablet.table(), tablet.startHash(), tablet.endHash(), one));
    }
    try (ShoalClient c = ShoalClient.clusterWithMap(coordinator, new TabletMap(wrong, one, 0), 10_000)) {
      for (int i = 0; i < 50; i++) {
        c.write(t, s("r" + i), s("x" + i));
      }
      assertTrue(c.refreshes() >= 1, "the client never refreshed its map");
      for (int i = 0; i < 50; i++) {
        assertArrayEquals(s("x" + i), c.read(t, s("r" + i)).value());
      }
      dropAndCheck(c, "java-client-routing");
    }
  }

  @Test
  void ycsbBindingReadsUpdatesAndScans() throws Exception {
    ShoalDB db = new ShoalDB();
    java.util.Properties p = new java.util.Properties();
    p.setProperty("shoal.coordinator", coordinator.getHostString() + ":" + coordinator.getPort());
    db.setProperties(p);
    db.init();
    try {
      String table = "ycsb-binding-test";
      for (int i = 0; i < 200; i++) {
        Map<String, ByteIterator> rec = new HashMap<>();
        rec.put("field0", new StringByteIterator("a" + i));
        rec.put("field1", new StringByteIterator("b" + i));
        assertEquals(site.ycsb.Status.OK, db.insert(table, "user" + i, rec));
      }
      Map<String, ByteIterator> upd = new HashMap<>();
      upd.put("field1", new StringByteIterator("changed"));
      assertEquals(site.ycsb.Status.OK, db.update(table, "user7", upd));
      assertEquals(site.ycsb.Status.NOT_FOUND, db.update(table, "nobody", upd));
      Map<String, ByteIterator> out = new HashMap<>();
      assertEquals(site.ycsb.Status.OK, db.read(table, "user7", null, out));
      assertEquals("a7", out.get("field0").toString());
      assertEquals("changed", out.get("field1").toString());
      out.clear();
      assertEquals(site.ycsb.Status.OK, db.read(table, "user8", Set.of("field1"), out));
      assertEquals(Set.of("field1"), out.keySet());
      assertEquals(site.ycsb.Status.NOT_FOUND, db.read(table, "nobody", null, new HashMap<>()));
      // A scan gets the records whose key hash is at or after the start key's, each once.
      try (ShoalClient c = ShoalClient.cluster(coordinator, 10_000)) {
        long t = c.tableId(table);
        long start = KeyHash.of(t, s("user5"));
        int after = 0;
        for (int i = 0; i < 200; i++) {
          if (Long.compareUnsigned(KeyHash.of(t, s("user" + i)), start) >= 0) {
            after++;
          }
        }
        for (int len : new int[] {1, 10, 100, 500}) {
          Vector<HashMap<String, ByteIterator>> rows = new Vector<>();
          assertEquals(site.ycsb.Status.OK, db.scan(table, "user5", len, null, rows));
          assertEquals(Math.min(len, after), rows.size(), "scan of " + len);
          Set<String> distinct = new HashSet<>();
          for (HashMap<String, ByteIterator> r : rows) {
            assertEquals(2, r.size());
            distinct.add(r.get("field0").toString());
          }
          assertEquals(rows.size(), distinct.size(), "a record twice in one scan");
        }
        // The start key comes in the first hash bucket read (its order within
        // the bucket is the server's), so among the first few records.
        Vector<HashMap<String, ByteIterator>> first = new Vector<>();
        assertEquals(site.ycsb.Status.OK, db.scan(table, "user5", 10, null, first));
        assertTrue(first.stream().anyMatch(r -> r.get("field0").toString().equals("a5")),
            "a scan starts at its start key");
      }
      assertEquals(site.ycsb.Status.OK, db.delete(table, "user7"));
      assertEquals(site.ycsb.Status.NOT_FOUND, db.delete(table, "user7"));
      try (ShoalClient c = ShoalClient.cluster(coordinator, 10_000)) {
        dropAndCheck(c, table);
      }
    } finally {
      db.cleanup();
    }
  }
}
