package shoal.client;

import java.net.InetSocketAddress;
import java.util.List;

/**
 * The client's copy of the tablet map: which server masters which key-hash
 * range of which table. A single server's map is one catch-all entry.
 */
public final class TabletMap {
  /** A key-hash range [startHash, endHash] (unsigned, inclusive) of a table ({@code table < 0}: every table). */
  public record Tablet(long table, long startHash, long endHash, InetSocketAddress server) {
    boolean contains(long t, long hash) {
      return (table < 0 || table == t)
          && Long.compareUnsigned(startHash, hash) <= 0
          && Long.compareUnsigned(hash, endHash) <= 0;
    }
  }

  private final List<Tablet> tablets;
  private final InetSocketAddress admin;
  private final long version;

  public TabletMap(List<Tablet> tablets, InetSocketAddress admin, long version) {
    this.tablets = List.copyOf(tablets);
    this.admin = admin;
    this.version = version;
  }

  /** Everything at one server. */
  public static TabletMap single(InetSocketAddress server) {
    return new TabletMap(List.of(new Tablet(-1, 0, -1L, server)), server, 0);
  }

  /** The master of {@code (table, hash)}, or null if no tablet holds it. */
  public InetSocketAddress locate(long table, long hash) {
    for (Tablet t : tablets) {
      if (t.contains(table, hash)) {
        return t.server();
      }
    }
    return null;
  }

  /** Where table management goes (the first server up; it asks the coordinator). */
  public InetSocketAddress admin() {
    return admin;
  }

  /** Whether a tablet names {@code table} (a cluster's map names each of its tables). */
  public boolean namesTable(long table) {
    for (Tablet t : tablets) {
      if (t.table() == table) {
        return true;
      }
    }
    return false;
  }

  public List<Tablet> tablets() {
    return tablets;
  }

  /** The coordinator's map version (0 for a single server). */
  public long version() {
    return version;
  }
}
