package shoal.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Fetches the cluster map from the coordinator's control port
 * (docs/coordinator.md): a frame is a u32 little-endian length and that many
 * bytes of JSON; {@code {"op":"get_map"}} is answered by
 * {@code {"reply":"map","map":{...}}}. Anonymous connections may ask for it.
 */
public final class Coordinator {
  /** Largest control frame the coordinator sends (MAX_CONTROL_FRAME). */
  private static final int MAX_FRAME = 16 << 20;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final InetSocketAddress addr;
  private final int timeoutMs;

  public Coordinator(InetSocketAddress addr, int timeoutMs) {
    this.addr = addr;
    this.timeoutMs = timeoutMs;
  }

  public InetSocketAddress address() {
    return addr;
  }

  /** The current map as a client's tablet map: each tablet at its master's native address. */
  public TabletMap fetch() throws IOException {
    JsonNode reply = call("{\"op\":\"get_map\"}");
    if (!"map".equals(reply.path("reply").asText())) {
      throw new ShoalException("unexpected answer from the coordinator at " + addr + ": " + reply);
    }
    return tabletMap(reply.get("map"));
  }

  /** Converts the coordinator's map JSON; fails if no server is up. */
  static TabletMap tabletMap(JsonNode map) throws ShoalException {
    Map<Long, InetSocketAddress> natives = new HashMap<>();
    InetSocketAddress admin = null;
    long adminId = Long.MAX_VALUE;
    for (JsonNode s : map.path("servers")) {
      long id = s.get("id").asLong();
      InetSocketAddress native_ = parseAddr(s.get("native").asText());
      natives.put(id, native_);
      if ("up".equals(s.path("state").asText()) && id < adminId) {
        adminId = id;
        admin = native_;
      }
    }
    if (admin == null) {
      throw new ShoalException("the cluster has no servers up");
    }
    List<TabletMap.Tablet> tablets = new ArrayList<>();
    for (JsonNode t : map.path("tablets")) {
      InetSocketAddress server = natives.get(t.get("master").asLong());
      if (server == null) {
        continue;
      }
      // u64 fields: Jackson reads values past 2^63 as BigInteger; longValue() keeps their bits.
      tablets.add(new TabletMap.Tablet(
          t.get("table").bigIntegerValue().longValue(),
          t.get("start_hash").bigIntegerValue().longValue(),
          t.get("end_hash").bigIntegerValue().longValue(),
          server));
    }
    return new TabletMap(tablets, admin, map.path("version").asLong());
  }

  /** "127.0.0.1:7700" or "[::1]:7700". */
  public static InetSocketAddress parseAddr(String s) {
    int colon = s.lastIndexOf(':');
    if (colon < 0) {
      throw new IllegalArgumentException("address without a port: " + s);
    }
    String host = s.substring(0, colon);
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.substring(1, host.length() - 1);
    }
    return new InetSocketAddress(host, Integer.parseInt(s.substring(colon + 1)));
  }

  private JsonNode call(String request) throws IOException {
    try (Socket s = new Socket()) {
      s.setTcpNoDelay(true);
      s.connect(addr, timeoutMs);
      s.setSoTimeout(timeoutMs);
      byte[] body = request.getBytes(StandardCharsets.UTF_8);
      OutputStream out = s.getOutputStream();
      out.write(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(body.length).array());
      out.write(body);
      out.flush();
      DataInputStream in = new DataInputStream(s.getInputStream());
      byte[] len = new byte[4];
      in.readFully(len);
      long n = Integer.toUnsignedLong(ByteBuffer.wrap(len).order(ByteOrder.LITTLE_ENDIAN).getInt());
      if (n > MAX_FRAME) {
        throw new ShoalException("control frame of " + n + " bytes from " + addr);
      }
      byte[] reply = new byte[(int) n];
      in.readFully(reply);
      JsonNode node = JSON.readTree(reply);
      if ("error".equals(node.path("reply").asText())) {
        throw new ShoalException("the coordinator refused: " + node.path("code").asText() + ": "
            + node.path("message").asText());
      }
      return node;
    }
  }
}
