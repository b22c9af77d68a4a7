package shoal.client;

import java.io.IOException;

/** A failure of the client: a protocol violation, an unreachable cluster, or a status it cannot retry. */
public class ShoalException extends IOException {
  private static final long serialVersionUID = 1L;

  public ShoalException(String message) {
    super(message);
  }

  public ShoalException(String message, Throwable cause) {
    super(message, cause);
  }
}
