package shoal.client;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import net.openhft.hashing.LongHashFunction;

/**
 * The key hash that routes a key to its tablet (docs/wire-format.md, "Key
 * hash"): XXH3-64, seed 0, of the table id as 8 little-endian bytes followed
 * by the key. For a slot-hashed table (bit 6 of its id set) the top 14 bits
 * are the key's Redis Cluster slot and the low 50 bits the top 50 bits of
 * that XXH3 hash.
 */
public final class KeyHash {
  private KeyHash() {}

  private static final LongHashFunction XXH3 = LongHashFunction.xx3();
  /** The flag bit of a table id that makes the table slot-hashed. */
  public static final long SLOT_HASHED = 1L << 6;
  private static final int SLOT_SHIFT = 50;
  public static final int SLOTS = 16384;

  /** XXH3-64 (seed 0) of {@code bytes}. */
  public static long xxh3(byte[] bytes) {
    return XXH3.hashBytes(bytes);
  }

  public static long of(long table, byte[] key) {
    byte[] buf = ByteBuffer.allocate(8 + key.length).order(ByteOrder.LITTLE_ENDIAN).putLong(table).put(key).array();
    long h = xxh3(buf);
    if ((table & SLOT_HASHED) != 0) {
      return ((long) keySlot(key) << SLOT_SHIFT) | (h >>> (64 - SLOT_SHIFT));
    }
    return h;
  }

  /** The Redis Cluster slot of {@code key}: CRC16 (XMODEM) of its hash tag or of the key, modulo 16384. */
  public static int keySlot(byte[] key) {
    int start = 0;
    int end = key.length;
    for (int i = 0; i < key.length; i++) {
      if (key[i] == '{') {
        for (int j = i + 1; j < key.length; j++) {
          if (key[j] == '}') {
            if (j > i + 1) {
              start = i + 1;
              end = j;
            }
            break;
          }
        }
        break;
      }
    }
    return crc16Xmodem(key, start, end) % SLOTS;
  }

  /** CRC-16/XMODEM: polynomial 0x1021, initial value 0, no reflection, no final xor. */
  static int crc16Xmodem(byte[] b, int from, int to) {
    int crc = 0;
    for (int i = from; i < to; i++) {
      crc ^= (b[i] & 0xff) << 8;
      for (int bit = 0; bit < 8; bit++) {
        crc = (crc & 0x8000) != 0 ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
      }
    }
    return crc;
  }
}
