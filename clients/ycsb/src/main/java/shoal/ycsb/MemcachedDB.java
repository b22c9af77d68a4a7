package shoal.ycsb;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.transcoders.Transcoder;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

/**
 * YCSB binding for memcached (text protocol), with spymemcached. YCSB
 * 0.17.0's own memcached-binding is not on Maven Central, so this is ours.
 *
 * <p>Properties: {@code memcached.hosts} (host:port, comma-separated;
 * default 127.0.0.1:11211), {@code memcached.timeout_ms} (default 10000),
 * {@code memcached.update_attempts} (CAS attempts, default 100).
 *
 * <p>A record is one item whose value is {@link RecordCodec}'s encoding, as
 * with Shoal. update: gets, merge, cas (again on a lost race). memcached
 * cannot enumerate keys in order, so scan answers NOT_IMPLEMENTED (YCSB
 * counts those operations as failed: workload E is not run on memcached).
 */
public class MemcachedDB extends DB {
  private MemcachedClient client;
  private long timeoutMs;
  private int updateAttempts;

  /** Stores byte arrays as they are (flags 0). */
  private static final Transcoder<byte[]> RAW = new Transcoder<>() {
    @Override
    public boolean asyncDecode(net.spy.memcached.CachedData d) {
      return false;
    }

    @Override
    public net.spy.memcached.CachedData encode(byte[] o) {
      return new net.spy.memcached.CachedData(0, o, getMaxSize());
    }

    @Override
    public byte[] decode(net.spy.memcached.CachedData d) {
      return d.getData();
    }

    @Override
    public int getMaxSize() {
      return net.spy.memcached.CachedData.MAX_SIZE;
    }
  };

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    timeoutMs = Long.parseLong(p.getProperty("memcached.timeout_ms", "10000"));
    updateAttempts = Integer.parseInt(p.getProperty("memcached.update_attempts", "100"));
    List<InetSocketAddress> addrs = new ArrayList<>();
    for (String h : p.getProperty("memcached.hosts", "127.0.0.1:11211").split(",")) {
      addrs.add(shoal.client.Coordinator.parseAddr(h.trim()));
    }
    try {
      client = new MemcachedClient(new ConnectionFactoryBuilder()
          .setProtocol(ConnectionFactoryBuilder.Protocol.TEXT)
          .setOpTimeout(timeoutMs)
          .setDaemon(true)
          .setFailureMode(net.spy.memcached.FailureMode.Retry)
          .build(), addrs);
    } catch (IOException e) {
      throw new DBException("cannot start the memcached client: " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() {
    if (client != null) {
      client.shutdown(timeoutMs, TimeUnit.MILLISECONDS);
    }
  }

  private static String key(String table, String key) {
    return table + ":" + key;
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      byte[] v = client.get(key(table, key), RAW);
      if (v == null) {
        return Status.NOT_FOUND;
      }
      Fields.fill(RecordCodec.decode(v, fields), fields, result);
      return Status.OK;
    } catch (RuntimeException e) {
      return error("read", key, e);
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      boolean ok = client.set(key(table, key), 0, RecordCodec.encode(Fields.toBytes(values)), RAW)
          .get(timeoutMs, TimeUnit.MILLISECONDS);
      return ok ? Status.OK : Status.ERROR;
    } catch (Exception e) {
      return error("insert", key, e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      String k = key(table, key);
      Map<String, byte[]> changes = Fields.toBytes(values);
      for (int attempt = 0; attempt < updateAttempts; attempt++) {
        CASValue<byte[]> cur = client.gets(k, RAW);
        if (cur == null) {
          return Status.NOT_FOUND;
        }
        Map<String, byte[]> merged = RecordCodec.decode(cur.getValue());
        merged.putAll(changes);
        CASResponse r = client.cas(k, cur.getCas(), RecordCodec.encode(merged), RAW);
        switch (r) {
          case OK:
            return Status.OK;
          case NOT_FOUND:
            return Status.NOT_FOUND;
          case EXISTS:
            continue;
          default:
            return error("update", key, new IllegalStateException("cas answered " + r));
        }
      }
      return Status.UNEXPECTED_STATE;
    } catch (RuntimeException e) {
      return error("update", key, e);
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      boolean ok = client.delete(key(table, key)).get(timeoutMs, TimeUnit.MILLISECONDS);
      return ok ? Status.OK : Status.NOT_FOUND;
    } catch (Exception e) {
      return error("delete", key, e);
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    return Status.NOT_IMPLEMENTED;
  }

  private static Status error(String op, String key, Exception e) {
    System.err.println("memcached: " + op + " " + key + ": " + e.getMessage());
    return Status.ERROR;
  }
}
