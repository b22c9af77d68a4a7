package shoal.client;

/** Bytes that do not follow the wire format (a truncated body, trailing bytes, a bad header). */
public class ProtocolException extends ShoalException {
  private static final long serialVersionUID = 1L;

  public ProtocolException(String message) {
    super(message);
  }
}
