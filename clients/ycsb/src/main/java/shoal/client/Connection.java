package shoal.client;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;

/**
 * One TCP connection to a server's native port. Requests are sent one at a
 * time and each waits for its response (matched by request id): a YCSB
 * thread has its own client, so it needs no pipelining. Not thread-safe.
 */
public final class Connection implements Closeable {
  private final InetSocketAddress addr;
  private final Socket socket;
  private final DataInputStream in;
  private final OutputStream out;
  private final int maxBody;
  private boolean broken;

  public Connection(InetSocketAddress addr, int timeoutMs, int maxBody) throws IOException {
    this.addr = addr;
    this.maxBody = maxBody;
    Socket s = new Socket();
    try {
      s.setTcpNoDelay(true);
      s.connect(addr, timeoutMs);
      s.setSoTimeout(timeoutMs);
    } catch (IOException e) {
      s.close();
      throw e;
    }
    this.socket = s;
    InputStream raw = s.getInputStream();
    this.in = new DataInputStream(new BufferedInputStream(raw, 64 << 10));
    this.out = new BufferedOutputStream(s.getOutputStream(), 64 << 10);
  }

  public InetSocketAddress address() {
    return addr;
  }

  /** Whether an error left the stream unusable (the caller then opens a new connection). */
  public boolean broken() {
    return broken;
  }

  /**
   * Sends {@code frame} (built by {@link Wire}, request id {@code id}) and
   * returns its response. A response for another id, or bytes that are not
   * a frame, break the connection.
   */
  public Response call(byte[] frame, long id) throws IOException {
    if (broken) {
      throw new ShoalException("connection to " + addr + " is broken");
    }
    try {
      out.write(frame);
      out.flush();
      byte[] h = new byte[Wire.HEADER_BYTES];
      in.readFully(h);
      Response.Header header = Response.header(h, maxBody);
      byte[] body = new byte[header.bodyLength()];
      in.readFully(body);
      Response r = Response.decode(header, body);
      if (header.requestId() != id) {
        throw new ProtocolException("response for request " + header.requestId() + ", expected " + id);
      }
      int op = frame[2] & 0xff;
      if (header.opcode() != op) {
        throw new ProtocolException("response opcode " + header.opcode() + " to a request of opcode " + op);
      }
      return r;
    } catch (IOException e) {
      broken = true;
      throw e;
    }
  }

  @Override
  public void close() {
    broken = true;
    try {
      socket.close();
    } catch (IOException ignored) {
      // Closing is best effort: the socket is gone either way.
    }
  }
}
