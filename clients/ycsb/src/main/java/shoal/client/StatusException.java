package shoal.client;

/** A request answered with a status other than OK that the caller must handle. */
public class StatusException extends ShoalException {
  private static final long serialVersionUID = 1L;
  private final int status;
  private final Response.Detail detail;

  public StatusException(int status, Response.Detail detail) {
    super(Status.name(status) + (detail.isEmpty() ? "" : " " + detail));
    this.status = status;
    this.detail = detail;
  }

  public int status() {
    return status;
  }

  public Response.Detail detail() {
    return detail;
  }
}
