package shoal.ycsb;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Response;
import redis.clients.jedis.exceptions.JedisException;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

/**
 * YCSB binding for Redis (and anything speaking RESP), with Jedis. YCSB
 * 0.17.0's own redis-binding is not on Maven Central, so this is ours.
 *
 * <p>Properties: {@code redis.host} (default 127.0.0.1), {@code redis.port}
 * (default 6379), {@code redis.password}, {@code redis.timeout_ms} (default
 * 10000).
 *
 * <p>A record is a hash (HSET of its fields; HGETALL or HMGET to read; HSET
 * of the changed fields to update; DEL to delete). For scans every key is
 * also in a sorted set {@code <table>:keys} with score 0, so ZRANGEBYLEX
 * gives the keys from the start key in key order, and their hashes are read
 * in one pipeline. Insert and delete keep that set in step (one pipeline of
 * two commands).
 */
public class RedisDB extends DB {
  private Jedis jedis;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty("redis.host", "127.0.0.1");
    int port = Integer.parseInt(p.getProperty("redis.port", "6379"));
    int timeout = Integer.parseInt(p.getProperty("redis.timeout_ms", "10000"));
    try {
      jedis = new Jedis(host, port, timeout);
      String password = p.getProperty("redis.password");
      if (password != null && !password.isEmpty()) {
        jedis.auth(password);
      }
      jedis.ping();
    } catch (JedisException e) {
      throw new DBException("cannot reach Redis at " + host + ":" + port + ": " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() {
    if (jedis != null) {
      jedis.close();
    }
  }

  private static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static String index(String table) {
    return table + ":keys";
  }

  private static Map<byte[], byte[]> hash(Map<String, ByteIterator> values) {
    Map<byte[], byte[]> h = new HashMap<>();
    for (Map.Entry<String, ByteIterator> e : values.entrySet()) {
      h.put(b(e.getKey()), e.getValue().toArray());
    }
    return h;
  }

  private static void fill(Map<byte[], byte[]> all, Set<String> fields, Map<String, ByteIterator> result) {
    Map<String, byte[]> named = new HashMap<>();
    for (Map.Entry<byte[], byte[]> e : all.entrySet()) {
      named.put(new String(e.getKey(), StandardCharsets.UTF_8), e.getValue());
    }
    Fields.fill(named, fields, result);
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      if (fields == null) {
        Map<byte[], byte[]> all = jedis.hgetAll(b(key));
        if (all.isEmpty()) {
          return Status.NOT_FOUND;
        }
        fill(all, null, result);
      } else {
        List<String> names = new ArrayList<>(fields);
        byte[][] raw = new byte[names.size()][];
        for (int i = 0; i < raw.length; i++) {
          raw[i] = b(names.get(i));
        }
        List<byte[]> vals = jedis.hmget(b(key), raw);
        boolean any = false;
        Map<String, byte[]> got = new HashMap<>();
        for (int i = 0; i < raw.length; i++) {
          if (vals.get(i) != null) {
            got.put(names.get(i), vals.get(i));
            any = true;
          }
        }
        if (!any) {
          return Status.NOT_FOUND;
        }
        Fields.fill(got, null, result);
      }
      return Status.OK;
    } catch (JedisException e) {
      return error("read", key, e);
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      Pipeline p = jedis.pipelined();
      p.del(b(key));
      p.hset(b(key), hash(values));
      p.zadd(b(index(table)), 0, b(key));
      p.sync();
      return Status.OK;
    } catch (JedisException e) {
      return error("insert", key, e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      // Only an existing record is updated, as in the other bindings.
      if (!jedis.exists(b(key))) {
        return Status.NOT_FOUND;
      }
      jedis.hset(b(key), hash(values));
      return Status.OK;
    } catch (JedisException e) {
      return error("update", key, e);
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      Pipeline p = jedis.pipelined();
      Response<Long> removed = p.del(b(key));
      p.zrem(b(index(table)), b(key));
      p.sync();
      return removed.get() == 0 ? Status.NOT_FOUND : Status.OK;
    } catch (JedisException e) {
      return error("delete", key, e);
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    try {
      List<byte[]> keys = jedis.zrangeByLex(b(index(table)), b("[" + startkey), b("+"), 0, recordcount);
      Pipeline p = jedis.pipelined();
      List<Response<Map<byte[], byte[]>>> hashes = new ArrayList<>();
      for (byte[] k : keys) {
        hashes.add(p.hgetAll(k));
      }
      p.sync();
      for (Response<Map<byte[], byte[]>> h : hashes) {
        HashMap<String, ByteIterator> row = new HashMap<>();
        fill(h.get(), fields, row);
        result.add(row);
      }
      return Status.OK;
    } catch (JedisException e) {
      return error("scan", startkey, e);
    }
  }

  private static Status error(String op, String key, Exception e) {
    System.err.println("redis: " + op + " " + key + ": " + e.getMessage());
    return Status.ERROR;
  }
}
