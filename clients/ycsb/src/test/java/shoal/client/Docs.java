package shoal.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Reads the tables of docs/wire-format.md, so the tests check the documented vectors themselves. */
final class Docs {
  private Docs() {}

  static Path docs() {
    String d = System.getProperty("shoal.docs");
    Path p = d != null ? Path.of(d) : Path.of("../../docs");
    if (!Files.isRegularFile(p.resolve("wire-format.md"))) {
      throw new IllegalStateException("docs/wire-format.md not found under " + p.toAbsolutePath());
    }
    return p;
  }

  /** The rows (cells, trimmed) of the first table after the heading {@code heading} in docs/wire-format.md. */
  static List<String[]> table(String heading) throws IOException {
    List<String> lines = Files.readAllLines(docs().resolve("wire-format.md"), StandardCharsets.UTF_8);
    int i = lines.indexOf(heading);
    if (i < 0) {
      throw new IllegalStateException("no heading " + heading + " in wire-format.md");
    }
    while (i < lines.size() && !lines.get(i).startsWith("|")) {
      i++;
    }
    i += 2; // the header row and the |---| row
    List<String[]> rows = new ArrayList<>();
    for (; i < lines.size() && lines.get(i).startsWith("|"); i++) {
      String l = lines.get(i).trim();
      String[] cells = l.substring(1, l.length() - 1).split("\\|");
      for (int c = 0; c < cells.length; c++) {
        cells[c] = cells[c].trim();
      }
      rows.add(cells);
    }
    return rows;
  }

  /** `53 01 ...` to bytes. */
  static byte[] hex(String cell) {
    String s = cell.replace("`", "").trim();
    String[] parts = s.split("\\s+");
    byte[] out = new byte[parts.length];
    for (int i = 0; i < parts.length; i++) {
      out[i] = (byte) Integer.parseInt(parts[i], 16);
    }
    return out;
  }
}
