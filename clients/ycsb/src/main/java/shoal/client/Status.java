package shoal.client;

/** Response statuses (docs/wire-format.md, "Statuses"). */
public final class Status {
  private Status() {}

  public static final int OK = 0;
  public static final int UNKNOWN_TABLE = 1;
  public static final int KEY_TOO_LARGE = 2;
  public static final int VALUE_TOO_LARGE = 3;
  public static final int OBJECT_DOESNT_EXIST = 4;
  public static final int OBJECT_EXISTS = 5;
  public static final int WRONG_VERSION = 6;
  public static final int NOT_AN_INTEGER = 7;
  public static final int OVERFLOW = 8;
  public static final int OUT_OF_MEMORY = 9;
  public static final int UNKNOWN_TABLE_NAME = 10;
  public static final int UNKNOWN_TABLET = 11;
  public static final int RETRY = 12;
  public static final int NOT_AUTHENTICATED = 13;
  public static final int AUTH_FAILED = 14;
  public static final int MALFORMED_REQUEST = 16;
  public static final int UNKNOWN_OPCODE = 17;
  public static final int FRAME_TOO_LARGE = 18;
  public static final int UNSUPPORTED_VERSION = 19;
  // Chunk locks (docs/chunks.md, "Locks"): only their opcodes answer these.
  public static final int LOCK_BUSY = 20;
  public static final int LOCK_NOT_HELD = 21;
  public static final int LOCK_LOST = 22;
  public static final int LOCK_TABLE_FULL = 23;
  public static final int LOCK_OWNER_LIMIT = 24;

  public static String name(int status) {
    return switch (status) {
      case OK -> "OK";
      case UNKNOWN_TABLE -> "UNKNOWN_TABLE";
      case KEY_TOO_LARGE -> "KEY_TOO_LARGE";
      case VALUE_TOO_LARGE -> "VALUE_TOO_LARGE";
      case OBJECT_DOESNT_EXIST -> "OBJECT_DOESNT_EXIST";
      case OBJECT_EXISTS -> "OBJECT_EXISTS";
      case WRONG_VERSION -> "WRONG_VERSION";
      case NOT_AN_INTEGER -> "NOT_AN_INTEGER";
      case OVERFLOW -> "OVERFLOW";
      case OUT_OF_MEMORY -> "OUT_OF_MEMORY";
      case UNKNOWN_TABLE_NAME -> "UNKNOWN_TABLE_NAME";
      case UNKNOWN_TABLET -> "UNKNOWN_TABLET";
      case RETRY -> "RETRY";
      case NOT_AUTHENTICATED -> "NOT_AUTHENTICATED";
      case AUTH_FAILED -> "AUTH_FAILED";
      case MALFORMED_REQUEST -> "MALFORMED_REQUEST";
      case UNKNOWN_OPCODE -> "UNKNOWN_OPCODE";
      case FRAME_TOO_LARGE -> "FRAME_TOO_LARGE";
      case UNSUPPORTED_VERSION -> "UNSUPPORTED_VERSION";
      case LOCK_BUSY -> "LOCK_BUSY";
      case LOCK_NOT_HELD -> "LOCK_NOT_HELD";
      case LOCK_LOST -> "LOCK_LOST";
      case LOCK_TABLE_FULL -> "LOCK_TABLE_FULL";
      case LOCK_OWNER_LIMIT -> "LOCK_OWNER_LIMIT";
      default -> "STATUS_" + status;
    };
  }
}
