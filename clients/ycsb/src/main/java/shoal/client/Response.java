package shoal.client;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One response frame: its header, its status and the status's detail, and
 * the operation's result (after status OK), decoded on demand by the method
 * for the operation. Every decoder checks each length against the bytes that
 * remain and refuses trailing bytes, as docs/wire-format.md requires.
 */
public final class Response {
  private final int opcode;
  private final long requestId;
  private final int status;
  private final Detail detail;
  /** The body after the status byte and its detail (the result, for OK). */
  private final ByteBuffer result;

  private Response(int opcode, long requestId, int status, Detail detail, ByteBuffer result) {
    this.opcode = opcode;
    this.requestId = requestId;
    this.status = status;
    this.detail = detail;
    this.result = result;
  }

  /** A frame's header (16 bytes), checked as a client must. */
  public record Header(int opcode, int flags, long requestId, int bodyLength) {}

  /** Decodes and checks a header; {@code maxBody} bounds the body length. */
  public static Header header(byte[] h, int maxBody) throws ProtocolException {
    if (h.length < Wire.HEADER_BYTES) {
      throw new ProtocolException("a header is 16 bytes");
    }
    ByteBuffer b = ByteBuffer.wrap(h, 0, Wire.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    int magic = b.get() & 0xff;
    int version = b.get() & 0xff;
    int opcode = b.get() & 0xff;
    int flags = b.get() & 0xff;
    long id = b.getLong();
    long len = Integer.toUnsignedLong(b.getInt());
    if (magic != Wire.MAGIC) {
      throw new ProtocolException(String.format("bad magic byte 0x%02x", magic));
    }
    if (version != Wire.VERSION) {
      throw new ProtocolException("protocol version " + version + ", this client speaks 1");
    }
    if ((flags & Wire.FLAG_RESPONSE) == 0 || (flags & ~Wire.FLAG_RESPONSE) != 0) {
      throw new ProtocolException(String.format("flags 0x%02x on a response", flags));
    }
    if (len > maxBody) {
      throw new ProtocolException("response body of " + len + " bytes, over the limit " + maxBody);
    }
    return new Header(opcode, flags, id, (int) len);
  }

  /** Decodes a whole frame (header and body). */
  public static Response decode(byte[] frame) throws ProtocolException {
    Header h = header(frame, Integer.MAX_VALUE);
    if (frame.length != Wire.HEADER_BYTES + h.bodyLength()) {
      throw new ProtocolException("frame of " + frame.length + " bytes, header says " + (16 + h.bodyLength()));
    }
    byte[] body = new byte[h.bodyLength()];
    System.arraycopy(frame, Wire.HEADER_BYTES, body, 0, body.length);
    return decode(h, body);
  }

  /** Decodes a body whose header was read already. */
  public static Response decode(Header h, byte[] body) throws ProtocolException {
    ByteBuffer b = ByteBuffer.wrap(body).order(ByteOrder.LITTLE_ENDIAN);
    try {
      if (!b.hasRemaining()) {
        throw new ProtocolException("empty response body: the status byte is missing");
      }
      int status = b.get() & 0xff;
      Detail d = Detail.decode(status, b);
      if (status != Status.OK && b.hasRemaining()) {
        throw new ProtocolException(b.remaining() + " trailing bytes after " + Status.name(status));
      }
      return new Response(h.opcode(), h.requestId(), status, d, b.slice().order(ByteOrder.LITTLE_ENDIAN));
    } catch (BufferUnderflowException e) {
      throw new ProtocolException("truncated status detail");
    }
  }

  public int opcode() {
    return opcode;
  }

  public long requestId() {
    return requestId;
  }

  public int status() {
    return status;
  }

  public Detail detail() {
    return detail;
  }

  public boolean ok() {
    return status == Status.OK;
  }

  /** Throws the status as a {@link StatusException} unless it is OK. */
  public Response requireOk() throws StatusException {
    if (status != Status.OK) {
      throw new StatusException(status, detail);
    }
    return this;
  }

  // ---- results (status OK) ----

  /** The value and version an object has. */
  public record Versioned(long version, byte[] value) {}

  /** One object of an ENUMERATE page. */
  public record EnumObject(long version, byte[] key, byte[] value) {}

  /** An ENUMERATE page; {@code more} false means the table is done (next cursor 0). */
  public record Page(boolean more, long nextCursor, List<EnumObject> objects) {}

  /** A READ_TTL result: expiresAt 0 and ttlMs 0 mean no expiry. */
  public record Ttl(long version, long expiresAt, long ttlMs) {}

  /** One item of a multi-op response: its status, detail, and (OK) result. */
  public record Item<T>(int status, Detail detail, T result) {}

  /** READ: version u64, value length u32, value. */
  public Versioned readResult() throws ProtocolException {
    return parse(op(Wire.READ), b -> versioned(b));
  }

  /** WRITE, WRITE_TTL and REMOVE answer a version u64 (REMOVE: 0 if it did not exist). */
  public long version() throws ProtocolException {
    if (opcode != Wire.WRITE && opcode != Wire.WRITE_TTL && opcode != Wire.REMOVE) {
      throw new ProtocolException("a response to opcode " + opcode + " has no version");
    }
    return parse(true, ByteBuffer::getLong);
  }

  /** INCREMENT: value i64, version u64. */
  public long[] incrementResult() throws ProtocolException {
    return parse(op(Wire.INCREMENT), b -> new long[] {b.getLong(), b.getLong()});
  }

  /** CREATE_TABLE, GET_TABLE_ID: the table id. */
  public long tableId() throws ProtocolException {
    if (opcode != Wire.CREATE_TABLE && opcode != Wire.GET_TABLE_ID) {
      throw new ProtocolException("a response to opcode " + opcode + " has no table id");
    }
    return parse(true, ByteBuffer::getLong);
  }

  public Ttl ttlResult() throws ProtocolException {
    return parse(op(Wire.READ_TTL), b -> new Ttl(b.getLong(), b.getLong(), b.getLong()));
  }

  /** ENUMERATE: flags u8, next cursor u64, count u32, objects. */
  public Page page() throws ProtocolException {
    return parse(op(Wire.ENUMERATE), b -> {
      int flags = b.get() & 0xff;
      if ((flags & ~1) != 0) {
        throw new ProtocolException(String.format("enumerate flags 0x%02x", flags));
      }
      long next = b.getLong();
      int count = count(b, 16);
      List<EnumObject> objs = new ArrayList<>(count);
      for (int i = 0; i < count; i++) {
        long version = b.getLong();
        int kl = length(b);
        int vl = length(b);
        byte[] k = bytes(b, kl);
        byte[] v = bytes(b, vl);
        objs.add(new EnumObject(version, k, v));
      }
      return new Page((flags & 1) != 0, next, objs);
    });
  }

  /** MULTI_READ: count u32, per item: status, detail, read result if OK. */
  public List<Item<Versioned>> multiReadResult() throws ProtocolException {
    return parse(op(Wire.MULTI_READ), b -> items(b, 1, Response::versioned));
  }

  /** MULTI_WRITE and MULTI_REMOVE: count u32, per item: status, detail, version if OK. */
  public List<Item<Long>> multiVersionResult() throws ProtocolException {
    return parse(opcode == Wire.MULTI_WRITE || opcode == Wire.MULTI_REMOVE, b -> items(b, 1, ByteBuffer::getLong));
  }

  /** STATS: count u16, per stat: name length u8, name, kind u8 (0 u64, 1 f64), value. */
  public Map<String, Number> statsResult() throws ProtocolException {
    return parse(op(Wire.STATS), b -> {
      int count = b.getShort() & 0xffff;
      Map<String, Number> out = new LinkedHashMap<>();
      for (int i = 0; i < count; i++) {
        int nl = b.get() & 0xff;
        String name = utf8(bytes(b, nl));
        int kind = b.get() & 0xff;
        long raw = b.getLong();
        switch (kind) {
          case 0 -> out.put(name, raw);
          case 1 -> out.put(name, Double.longBitsToDouble(raw));
          default -> throw new ProtocolException("stat kind " + kind);
        }
      }
      return out;
    });
  }

  /** PING, DROP_TABLE, AUTH: an empty result. */
  public void empty() throws ProtocolException {
    parse(true, b -> null);
  }

  private boolean op(int expected) {
    return opcode == expected;
  }

  private interface Parser<T> {
    T parse(ByteBuffer b) throws ProtocolException;
  }

  private <T> T parse(boolean rightOpcode, Parser<T> p) throws ProtocolException {
    if (!rightOpcode) {
      throw new ProtocolException("unexpected response opcode " + opcode);
    }
    if (status != Status.OK) {
      throw new ProtocolException("no result after status " + Status.name(status));
    }
    ByteBuffer b = result.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    try {
      T t = p.parse(b);
      if (b.hasRemaining()) {
        throw new ProtocolException(b.remaining() + " trailing bytes after the result");
      }
      return t;
    } catch (BufferUnderflowException e) {
      throw new ProtocolException("truncated result");
    }
  }

  private static Versioned versioned(ByteBuffer b) throws ProtocolException {
    long version = b.getLong();
    int len = length(b);
    return new Versioned(version, bytes(b, len));
  }

  private static <T> List<Item<T>> items(ByteBuffer b, int minItem, Parser<T> ok) throws ProtocolException {
    int count = count(b, minItem);
    List<Item<T>> out = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      int s = b.get() & 0xff;
      Detail d = Detail.decode(s, b);
      out.add(new Item<>(s, d, s == Status.OK ? ok.parse(b) : null));
    }
    return out;
  }

  /** A u32 count, checked against what the remaining bytes could hold at {@code minItem} bytes an item. */
  private static int count(ByteBuffer b, int minItem) throws ProtocolException {
    long n = Integer.toUnsignedLong(b.getInt());
    if (n * minItem > b.remaining()) {
      throw new ProtocolException("count " + n + " larger than the body could hold");
    }
    return (int) n;
  }

  private static int length(ByteBuffer b) throws ProtocolException {
    long n = Integer.toUnsignedLong(b.getInt());
    if (n > Integer.MAX_VALUE) {
      throw new ProtocolException("length " + n);
    }
    return (int) n;
  }

  private static byte[] bytes(ByteBuffer b, int n) throws ProtocolException {
    if (n > b.remaining()) {
      throw new ProtocolException("length " + n + " beyond the body (" + b.remaining() + " bytes left)");
    }
    byte[] out = new byte[n];
    b.get(out);
    return out;
  }

  static String utf8(byte[] b) throws ProtocolException {
    try {
      return StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(b))
          .toString();
    } catch (CharacterCodingException e) {
      throw new ProtocolException("bad UTF-8");
    }
  }

  /**
   * A status's detail: the numbers it carries (a table id, a current
   * version, a length and a limit, a delay in microseconds) or a reason.
   */
  public record Detail(long a, long b, String reason, int fields) {
    static final Detail NONE = new Detail(0, 0, null, 0);

    public boolean isEmpty() {
      return fields == 0 && reason == null;
    }

    static Detail decode(int status, ByteBuffer b) throws ProtocolException {
      return switch (status) {
        case Status.UNKNOWN_TABLE, Status.OBJECT_EXISTS, Status.WRONG_VERSION -> new Detail(b.getLong(), 0, null, 1);
        case Status.KEY_TOO_LARGE, Status.VALUE_TOO_LARGE, Status.FRAME_TOO_LARGE ->
            new Detail(Integer.toUnsignedLong(b.getInt()), Integer.toUnsignedLong(b.getInt()), null, 2);
        case Status.RETRY, Status.LOCK_BUSY, Status.LOCK_TABLE_FULL, Status.LOCK_OWNER_LIMIT ->
            new Detail(Integer.toUnsignedLong(b.getInt()), 0, null, 1);
        case Status.MALFORMED_REQUEST -> {
          int n = b.getShort() & 0xffff;
          yield new Detail(0, 0, utf8(bytes(b, n)), 0);
        }
        case Status.OK, Status.OBJECT_DOESNT_EXIST, Status.NOT_AN_INTEGER, Status.OVERFLOW, Status.OUT_OF_MEMORY,
            Status.UNKNOWN_TABLE_NAME, Status.UNKNOWN_TABLET, Status.NOT_AUTHENTICATED, Status.AUTH_FAILED,
            Status.UNKNOWN_OPCODE, Status.UNSUPPORTED_VERSION, Status.LOCK_NOT_HELD, Status.LOCK_LOST -> NONE;
        default -> throw new ProtocolException("unknown status " + status);
      };
    }

    @Override
    public String toString() {
      if (reason != null) {
        return "(" + reason + ")";
      }
      return switch (fields) {
        case 0 -> "";
        case 1 -> "(" + Long.toUnsignedString(a) + ")";
        default -> "(" + a + ", " + b + ")";
      };
    }
  }
}
