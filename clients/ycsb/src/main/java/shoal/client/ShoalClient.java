package shoal.client;

import java.io.Closeable;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * A blocking client of Shoal's native protocol, for one thread at a time.
 *
 * <p>Every key operation is routed by {@code (table id, key hash)} through the
 * tablet map. As the Rust client does (crates/shoal-client): a server that
 * answers UNKNOWN_TABLET (not its tablet), or UNKNOWN_TABLE for a table the map
 * names (a server whose map is older than ours), makes the client fetch the map
 * again from the coordinator and resend; RETRY waits the delay it names (at
 * most 100 ms) and resends; a server that cannot be reached is waited for,
 * the map refreshed, and the request sent again (a read also when the
 * connection dropped with it in flight; a write's outcome is then unknown and
 * the error is the caller's). At most {@link #MAX_ATTEMPTS} sends per request.
 * Any other status is returned to the caller in the {@link Response}.
 */
public final class ShoalClient implements Closeable {
  public static final int MAX_ATTEMPTS = 200;
  private static final long UNREACHABLE_DELAY_MS = 50;
  private static final long MAX_RETRY_DELAY_US = 100_000;

  private final Coordinator coordinator;
  private final int timeoutMs;
  private final Map<InetSocketAddress, Connection> connections = new HashMap<>();
  private final Map<String, Long> tableIds = new HashMap<>();
  private TabletMap map;
  private long nextId = 1;
  private long refreshes;

  private ShoalClient(Coordinator coordinator, TabletMap map, int timeoutMs) {
    this.coordinator = coordinator;
    this.map = map;
    this.timeoutMs = timeoutMs;
  }

  /** A client of the cluster whose coordinator is at {@code coordinator}. */
  public static ShoalClient cluster(InetSocketAddress coordinator, int timeoutMs) throws IOException {
    Coordinator c = new Coordinator(coordinator, timeoutMs);
    return new ShoalClient(c, c.fetch(), timeoutMs);
  }

  /**
   * A client of the cluster of {@code coordinator} that starts from
   * {@code map} instead of fetching one (tests start from a wrong map to
   * check that the client finds the right one).
   */
  static ShoalClient clusterWithMap(InetSocketAddress coordinator, TabletMap map, int timeoutMs) {
    return new ShoalClient(new Coordinator(coordinator, timeoutMs), map, timeoutMs);
  }

  /** A client of one server (no coordinator: the map never changes). */
  public static ShoalClient single(InetSocketAddress server, int timeoutMs) {
    return new ShoalClient(null, TabletMap.single(server), timeoutMs);
  }

  public TabletMap tabletMap() {
    return map;
  }

  /** How many times the map was fetched again since the client started. */
  public long refreshes() {
    return refreshes;
  }

  // ---- operations ----

  public void ping() throws IOException {
    executeAdmin(Wire::ping).requireOk().empty();
  }

  /** Creates the table (or finds the existing one of that name) and returns its id. */
  public long createTable(String name) throws IOException {
    Long id = tableIds.get(name);
    if (id != null) {
      return id;
    }
    long t = executeAdmin(rid -> Wire.createTable(rid, name)).requireOk().tableId();
    tableIds.put(name, t);
    if (coordinator != null && !map.namesTable(t)) {
      // A new table: its tablets are in the coordinator's map from now on.
      refresh();
    }
    return t;
  }

  public long tableId(String name) throws IOException {
    Long id = tableIds.get(name);
    if (id != null) {
      return id;
    }
    long t = executeAdmin(rid -> Wire.getTableId(rid, name)).requireOk().tableId();
    tableIds.put(name, t);
    return t;
  }

  public void dropTable(String name) throws IOException {
    tableIds.remove(name);
    executeAdmin(rid -> Wire.dropTable(rid, name)).requireOk().empty();
  }

  /** The object's value and version, or null if it does not exist. */
  public Response.Versioned read(long table, byte[] key) throws IOException {
    Response r = executeKey(table, KeyHash.of(table, key), false, rid -> Wire.read(rid, table, key, RejectRules.NONE));
    if (r.status() == Status.OBJECT_DOESNT_EXIST) {
      return null;
    }
    return r.requireOk().readResult();
  }

  /** Writes the object unless {@code rules} refuse it (then a {@link StatusException}); returns its new version. */
  public long write(long table, byte[] key, byte[] value, RejectRules rules) throws IOException {
    Response r = executeKey(table, KeyHash.of(table, key), true, rid -> Wire.write(rid, table, key, value, rules));
    return r.requireOk().version();
  }

  public long write(long table, byte[] key, byte[] value) throws IOException {
    return write(table, key, value, RejectRules.NONE);
  }

  /** Removes the object; returns the version it had, 0 if it did not exist. */
  public long remove(long table, byte[] key, RejectRules rules) throws IOException {
    Response r = executeKey(table, KeyHash.of(table, key), true, rid -> Wire.remove(rid, table, key, rules));
    return r.requireOk().version();
  }

  public long remove(long table, byte[] key) throws IOException {
    return remove(table, key, RejectRules.NONE);
  }

  /**
   * One page of the table's objects from {@code cursor} (a key-hash position;
   * 0 to start), sent to the master of the tablet holding the cursor.
   */
  public Response.Page enumerate(long table, long cursor, int maxCount) throws IOException {
    return executeKey(table, cursor, false, rid -> Wire.enumerate(rid, table, cursor, maxCount)).requireOk().page();
  }

  public Map<String, Number> stats() throws IOException {
    return executeAdmin(Wire::stats).requireOk().statsResult();
  }

  public static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  // ---- routing and retries ----

  private interface Request {
    byte[] frame(long requestId);
  }

  private Response executeAdmin(Request req) throws IOException {
    return execute(-1, 0, false, true, req);
  }

  private Response executeKey(long table, long hash, boolean mutates, Request req) throws IOException {
    return execute(table, hash, mutates, false, req);
  }

  private Response execute(long table, long hash, boolean mutates, boolean admin, Request req) throws IOException {
    String last = "no attempt";
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      InetSocketAddress addr = admin ? map.admin() : map.locate(table, hash);
      if (addr == null) {
        // A table created since the map was fetched.
        if (attempt == 0) {
          refresh();
          continue;
        }
        throw new ShoalException("no tablet of table " + table + " holds hash " + Long.toUnsignedString(hash));
      }
      Connection conn;
      try {
        conn = connection(addr);
      } catch (IOException e) {
        // Never sent: safe to send again once the map says where.
        if (admin || attempt + 1 == MAX_ATTEMPTS) {
          throw new ShoalException("cannot connect to " + addr + ": " + e.getMessage(), e);
        }
        last = "cannot connect to " + addr;
        pause(UNREACHABLE_DELAY_MS * 1000);
        refresh();
        continue;
      }
      long id = nextId++;
      Response r;
      try {
        r = conn.call(req.frame(id), id);
      } catch (IOException e) {
        drop(conn);
        if (!mutates && !(e instanceof ProtocolException) && attempt + 1 < MAX_ATTEMPTS) {
          last = "connection to " + addr + " failed: " + e.getMessage();
          pause(UNREACHABLE_DELAY_MS * 1000);
          refresh();
          continue;
        }
        throw e;
      }
      switch (r.status()) {
        case Status.UNKNOWN_TABLET -> refresh();
        case Status.UNKNOWN_TABLE -> {
          if (!map.namesTable(r.detail().a())) {
            return r;
          }
          refresh();
        }
        case Status.RETRY -> pause(Math.min(r.detail().a(), MAX_RETRY_DELAY_US));
        default -> {
          return r;
        }
      }
      last = Status.name(r.status()) + " from " + addr;
    }
    throw new ShoalException("unavailable after " + MAX_ATTEMPTS + " attempts; last: " + last);
  }

  private Connection connection(InetSocketAddress addr) throws IOException {
    Connection c = connections.get(addr);
    if (c != null && !c.broken()) {
      return c;
    }
    c = new Connection(addr, timeoutMs, Wire.DEFAULT_MAX_BODY_BYTES);
    connections.put(addr, c);
    return c;
  }

  private void drop(Connection c) {
    c.close();
    connections.remove(c.address(), c);
  }

  /** Fetches the map again; keeps the one held if the coordinator cannot be reached. */
  private void refresh() {
    if (coordinator == null) {
      return;
    }
    refreshes++;
    try {
      map = coordinator.fetch();
    } catch (IOException e) {
      // Keep the current map; the next attempt tries again.
    }
  }

  private static void pause(long micros) throws ShoalException {
    try {
      Thread.sleep(micros / 1000, (int) (micros % 1000) * 1000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ShoalException("interrupted");
    }
  }

  @Override
  public void close() {
    for (Connection c : connections.values()) {
      c.close();
    }
    connections.clear();
  }
}
