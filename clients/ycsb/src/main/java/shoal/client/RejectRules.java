package shoal.client;

/**
 * Reject rules (9 bytes on the wire: flags u8, given version u64): conditions
 * under which the server refuses an operation and changes nothing.
 */
public record RejectRules(boolean doesntExist, boolean exists, boolean versionLe, boolean versionNe, long given) {
  /** Rejects nothing. */
  public static final RejectRules NONE = new RejectRules(false, false, false, false, 0);

  /** Compare-and-swap on version {@code v}: refuse unless the object exists at exactly {@code v}. */
  public static RejectRules versionIs(long v) {
    return new RejectRules(true, false, false, true, v);
  }

  /** Refuse if the object exists (create only). */
  public static RejectRules mustNotExist() {
    return new RejectRules(false, true, false, false, 0);
  }

  int flags() {
    return (doesntExist ? 1 : 0) | (exists ? 2 : 0) | (versionLe ? 4 : 0) | (versionNe ? 8 : 0);
  }

  void encode(Wire.Body b) {
    b.u8(flags());
    b.u64(given);
  }
}
