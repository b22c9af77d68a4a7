package shoal.client;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Encoding of Shoal native protocol requests (docs/wire-format.md, version 1).
 *
 * <p>Every method returns a whole frame: the 16-byte header (magic 0x53,
 * version 1, opcode, flags 0, request id u64, body length u32) and the body.
 * All integers are little-endian. Responses are decoded by {@link Response}.
 */
public final class Wire {
  private Wire() {}

  public static final int MAGIC = 0x53;
  public static final int VERSION = 1;
  public static final int FLAG_RESPONSE = 0x01;
  public static final int HEADER_BYTES = 16;
  /** The servers' default body limit; a client refuses larger responses before reading them. */
  public static final int DEFAULT_MAX_BODY_BYTES = 16 << 20;

  // Opcodes.
  public static final int PING = 1;
  public static final int READ = 2;
  public static final int WRITE = 3;
  public static final int REMOVE = 4;
  public static final int INCREMENT = 5;
  public static final int MULTI_READ = 6;
  public static final int MULTI_WRITE = 7;
  public static final int MULTI_REMOVE = 8;
  public static final int ENUMERATE = 9;
  public static final int WRITE_TTL = 10;
  public static final int READ_TTL = 11;
  public static final int CREATE_TABLE = 16;
  public static final int DROP_TABLE = 17;
  public static final int GET_TABLE_ID = 18;
  public static final int STATS = 19;
  public static final int AUTH = 20;

  /** Key op: table u64, reject rules (9 bytes), key length u32, key. */
  private static void keyOp(Body b, long table, byte[] key, RejectRules rules) {
    b.u64(table);
    rules.encode(b);
    b.u32(key.length);
    b.bytes(key);
  }

  /** Write op: table u64, reject rules, key length u32, value length u32, key, value. */
  private static void writeOp(Body b, long table, byte[] key, byte[] value, RejectRules rules) {
    b.u64(table);
    rules.encode(b);
    b.u32(key.length);
    b.u32(value.length);
    b.bytes(key);
    b.bytes(value);
  }

  private static void name(Body b, String name) {
    byte[] n = name.getBytes(StandardCharsets.UTF_8);
    if (n.length == 0 || n.length > 0xffff) {
      throw new IllegalArgumentException("a table name is 1 to 65535 bytes of UTF-8");
    }
    b.u16(n.length);
    b.bytes(n);
  }

  public static byte[] ping(long id) {
    return new Body().frame(PING, id);
  }

  public static byte[] read(long id, long table, byte[] key, RejectRules rules) {
    Body b = new Body();
    keyOp(b, table, key, rules);
    return b.frame(READ, id);
  }

  public static byte[] write(long id, long table, byte[] key, byte[] value, RejectRules rules) {
    Body b = new Body();
    writeOp(b, table, key, value, rules);
    return b.frame(WRITE, id);
  }

  public static byte[] remove(long id, long table, byte[] key, RejectRules rules) {
    Body b = new Body();
    keyOp(b, table, key, rules);
    return b.frame(REMOVE, id);
  }

  public static byte[] increment(long id, long table, byte[] key, long delta, RejectRules rules) {
    Body b = new Body();
    b.u64(table);
    rules.encode(b);
    b.u64(delta);
    b.u32(key.length);
    b.bytes(key);
    return b.frame(INCREMENT, id);
  }

  /** One item of a MULTI_READ: table u64, key length u32, key. */
  public record ReadItem(long table, byte[] key) {}

  public static byte[] multiRead(long id, List<ReadItem> items) {
    Body b = new Body();
    b.u32(items.size());
    for (ReadItem i : items) {
      b.u64(i.table());
      b.u32(i.key().length);
      b.bytes(i.key());
    }
    return b.frame(MULTI_READ, id);
  }

  public static byte[] enumerate(long id, long table, long cursor, int maxCount) {
    Body b = new Body();
    b.u64(table);
    b.u64(cursor);
    b.u32(maxCount);
    return b.frame(ENUMERATE, id);
  }

  public static byte[] writeTtl(long id, long table, byte[] key, byte[] value, long ttlMs, RejectRules rules) {
    if (ttlMs <= 0) {
      throw new IllegalArgumentException("a time to live is at least 1 ms");
    }
    Body b = new Body();
    b.u64(table);
    rules.encode(b);
    b.u64(ttlMs);
    b.u32(key.length);
    b.u32(value.length);
    b.bytes(key);
    b.bytes(value);
    return b.frame(WRITE_TTL, id);
  }

  public static byte[] readTtl(long id, long table, byte[] key, RejectRules rules) {
    Body b = new Body();
    keyOp(b, table, key, rules);
    return b.frame(READ_TTL, id);
  }

  public static byte[] createTable(long id, String name) {
    Body b = new Body();
    name(b, name);
    return b.frame(CREATE_TABLE, id);
  }

  public static byte[] dropTable(long id, String name) {
    Body b = new Body();
    name(b, name);
    return b.frame(DROP_TABLE, id);
  }

  public static byte[] getTableId(long id, String name) {
    Body b = new Body();
    name(b, name);
    return b.frame(GET_TABLE_ID, id);
  }

  public static byte[] stats(long id) {
    return new Body().frame(STATS, id);
  }

  public static byte[] auth(long id, byte[] user, byte[] password) {
    if (user.length > 0xffff || password.length > 0xffff) {
      throw new IllegalArgumentException("user and password are at most 65535 bytes each");
    }
    Body b = new Body();
    b.u16(user.length);
    b.u16(password.length);
    b.bytes(user);
    b.bytes(password);
    return b.frame(AUTH, id);
  }

  /** A growing little-endian body buffer. */
  static final class Body {
    private final ByteArrayOutputStream out = new ByteArrayOutputStream(64);
    private final ByteBuffer scratch = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);

    void u8(int v) {
      out.write(v & 0xff);
    }

    void u16(int v) {
      scratch.clear();
      scratch.putShort((short) v);
      out.write(scratch.array(), 0, 2);
    }

    void u32(int v) {
      scratch.clear();
      scratch.putInt(v);
      out.write(scratch.array(), 0, 4);
    }

    void u64(long v) {
      scratch.clear();
      scratch.putLong(v);
      out.write(scratch.array(), 0, 8);
    }

    void bytes(byte[] b) {
      out.write(b, 0, b.length);
    }

    /** The header for this body, then the body. */
    byte[] frame(int opcode, long id) {
      byte[] body = out.toByteArray();
      ByteBuffer f = ByteBuffer.allocate(HEADER_BYTES + body.length).order(ByteOrder.LITTLE_ENDIAN);
      f.put((byte) MAGIC).put((byte) VERSION).put((byte) opcode).put((byte) 0);
      f.putLong(id).putInt(body.length).put(body);
      return f.array();
    }
  }
}
