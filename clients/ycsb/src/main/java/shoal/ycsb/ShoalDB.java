package shoal.ycsb;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;
import shoal.client.Coordinator;
import shoal.client.KeyHash;
import shoal.client.RejectRules;
import shoal.client.Response;
import shoal.client.ShoalClient;
import shoal.client.StatusException;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

/**
 * YCSB binding for Shoal's native protocol (docs/ycsb.md).
 *
 * <p>Properties: {@code shoal.coordinator} (host:port of the coordinator: the
 * client routes each key to its master by the tablet map) or
 * {@code shoal.server} (host:port of one server's native port, no
 * coordinator); {@code shoal.timeout_ms} (socket timeout, default 10000);
 * {@code shoal.update_attempts} (compare-and-swap attempts of an update,
 * default 100).
 *
 * <p>A record is one object whose value is {@link RecordCodec}'s encoding of
 * its fields. read: READ, then the wanted fields. insert: WRITE. update (YCSB
 * updates some fields): READ, merge, WRITE only if the version is still the
 * one read (reject rules doesnt_exist|version_ne), again on WRONG_VERSION.
 * delete: REMOVE. scan: ENUMERATE from the start key's hash: the records whose
 * key hash is at or after it, in hash order (Shoal keeps no key order).
 *
 * <p>YCSB makes one instance per client thread; each has its own client and
 * connections.
 */
public class ShoalDB extends DB {
  private ShoalClient client;
  private final Map<String, Long> tables = new HashMap<>();
  private int updateAttempts;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    int timeout = Integer.parseInt(p.getProperty("shoal.timeout_ms", "10000"));
    updateAttempts = Integer.parseInt(p.getProperty("shoal.update_attempts", "100"));
    String coord = p.getProperty("shoal.coordinator");
    String server = p.getProperty("shoal.server");
    try {
      if (coord != null && !coord.isEmpty()) {
        client = ShoalClient.cluster(Coordinator.parseAddr(coord), timeout);
      } else if (server != null && !server.isEmpty()) {
        client = ShoalClient.single(Coordinator.parseAddr(server), timeout);
      } else {
        throw new DBException("set shoal.coordinator=HOST:PORT (a cluster) or shoal.server=HOST:PORT (one server)");
      }
      client.ping();
    } catch (IOException e) {
      throw new DBException("cannot reach Shoal: " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() {
    if (client != null) {
      client.close();
    }
  }

  /** The table's id, created on first use (CREATE_TABLE is idempotent by name). */
  private long table(String name) throws IOException {
    Long id = tables.get(name);
    if (id == null) {
      id = client.createTable(name);
      tables.put(name, id);
    }
    return id;
  }

  private static byte[] key(String k) {
    return ShoalClient.utf8(k);
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      Response.Versioned v = client.read(table(table), key(key));
      if (v == null) {
        return Status.NOT_FOUND;
      }
      Fields.fill(RecordCodec.decode(v.value(), fields), fields, result);
      return Status.OK;
    } catch (IOException | IllegalArgumentException e) {
      return error("read", key, e);
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      client.write(table(table), key(key), RecordCodec.encode(Fields.toBytes(values)));
      return Status.OK;
    } catch (IOException | IllegalArgumentException e) {
      return error("insert", key, e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      long t = table(table);
      byte[] k = key(key);
      Map<String, byte[]> changes = Fields.toBytes(values);
      for (int attempt = 0; attempt < updateAttempts; attempt++) {
        Response.Versioned current = client.read(t, k);
        if (current == null) {
          return Status.NOT_FOUND;
        }
        Map<String, byte[]> merged = RecordCodec.decode(current.value());
        merged.putAll(changes);
        try {
          client.write(t, k, RecordCodec.encode(merged), RejectRules.versionIs(current.version()));
          return Status.OK;
        } catch (StatusException e) {
          if (e.status() == shoal.client.Status.OBJECT_DOESNT_EXIST) {
            return Status.NOT_FOUND;
          }
          if (e.status() != shoal.client.Status.WRONG_VERSION) {
            throw e;
          }
          // Another writer got in between: read again and merge again.
        }
      }
      System.err.println("shoal: update of " + key + " lost " + updateAttempts + " compare-and-swap races");
      return Status.UNEXPECTED_STATE;
    } catch (IOException | IllegalArgumentException e) {
      return error("update", key, e);
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      long had = client.remove(table(table), key(key));
      return had == 0 ? Status.NOT_FOUND : Status.OK;
    } catch (IOException | IllegalArgumentException e) {
      return error("delete", key, e);
    }
  }

  /**
   * The first {@code recordcount} records whose key hash is at or after the
   * start key's, in hash order, by ENUMERATE pages from that hash (each page
   * sent to the master of the tablet holding the cursor). Fewer at the end of
   * the table: the scan does not wrap around.
   */
  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    try {
      long t = table(table);
      long start = KeyHash.of(t, key(startkey));
      long cursor = start;
      // Each page either returns objects or moves the cursor on; a bound on
      // pages keeps a misbehaving server from looping us forever.
      int maxPages = 1000 + recordcount;
      for (int page = 0; page < maxPages && result.size() < recordcount; page++) {
        int want = Math.min(recordcount - result.size(), 1000);
        Response.Page p = client.enumerate(t, cursor, want);
        for (Response.EnumObject o : p.objects()) {
          if (result.size() >= recordcount) {
            break;
          }
          // A page starts at the cursor's hash bucket, which may hold keys
          // hashing just below the start.
          if (Long.compareUnsigned(KeyHash.of(t, o.key()), start) < 0) {
            continue;
          }
          result.add(Fields.toIterators(RecordCodec.decode(o.value(), fields), fields));
        }
        if (!p.more()) {
          return Status.OK;
        }
        cursor = p.nextCursor();
      }
      return Status.OK;
    } catch (IOException | IllegalArgumentException e) {
      return error("scan", startkey, e);
    }
  }

  private static Status error(String op, String key, Exception e) {
    System.err.println("shoal: " + op + " " + key + ": " + e.getMessage());
    return Status.ERROR;
  }
}
