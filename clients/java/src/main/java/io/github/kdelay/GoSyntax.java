package io.github.kdelay;

import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.time.ZoneOffset;

/**
 * The value syntax of kdelay headers, as the Go relay reads it: Go's
 * {@code time.ParseDuration}, {@code strconv.ParseInt} (ASCII digits only),
 * {@code strings.TrimSpace} (Unicode white space) and RFC 3339 as Go's
 * {@code time.Parse(time.RFC3339Nano, v)} accepts it. Package-private; the
 * shared vectors in {@code testdata/contract} hold it to the Go code.
 */
final class GoSyntax {
  private GoSyntax() {}

  /** Thrown for a value Go would not parse. */
  static final class SyntaxException extends Exception {
    private static final long serialVersionUID = 1L;

    SyntaxException(String msg) {
      super(msg, null, false, false);
    }
  }

  private static final long NS = 1L;
  private static final long US = 1_000L;
  private static final long MS = 1_000_000L;
  private static final long S = 1_000_000_000L;

  /** 1 << 63 as an unsigned 64-bit value. */
  private static final long U63 = Long.MIN_VALUE;

  private static boolean ugt(long a, long b) {
    return Long.compareUnsigned(a, b) > 0;
  }

  private static double u2d(long x) {
    if (x >= 0) {
      return (double) x;
    }
    // Unsigned to double the way Go converts uint64: round to nearest.
    return ((double) (x >>> 1 | (x & 1))) * 2.0;
  }

  private static long unit(byte[] b, int from, int to) {
    String u = new String(b, from, to - from, StandardCharsets.UTF_8);
    switch (u) {
      case "ns":
        return NS;
      case "us":
      case "\u00b5s": // micro sign
      case "\u03bcs": // Greek mu
        return US;
      case "ms":
        return MS;
      case "s":
        return S;
      case "m":
        return 60 * S;
      case "h":
        return 3600 * S;
      default:
        return 0;
    }
  }

  /** Go's time.ParseDuration: nanoseconds. */
  static long parseDuration(String str) throws SyntaxException {
    byte[] s = str.getBytes(StandardCharsets.UTF_8);
    int i = 0;
    int n = s.length;
    boolean neg = false;
    if (n > 0 && (s[0] == '-' || s[0] == '+')) {
      neg = s[0] == '-';
      i++;
    }
    if (n - i == 1 && s[i] == '0') {
      return 0;
    }
    if (i == n) {
      throw new SyntaxException("invalid duration");
    }
    long d = 0;
    while (i < n) {
      long v = 0;
      long f = 0;
      double scale = 1;
      if (!(s[i] == '.' || ('0' <= s[i] && s[i] <= '9'))) {
        throw new SyntaxException("invalid duration");
      }
      int start = i;
      for (; i < n && '0' <= s[i] && s[i] <= '9'; i++) {
        if (ugt(v, Long.divideUnsigned(U63, 10))) {
          throw new SyntaxException("invalid duration");
        }
        v = v * 10 + (s[i] - '0');
        if (ugt(v, U63)) {
          throw new SyntaxException("invalid duration");
        }
      }
      boolean pre = i != start;
      boolean post = false;
      if (i < n && s[i] == '.') {
        i++;
        int fs = i;
        boolean overflow = false;
        for (; i < n && '0' <= s[i] && s[i] <= '9'; i++) {
          if (overflow) {
            continue;
          }
          if (ugt(f, (U63 - 1) / 10)) {
            overflow = true;
            continue;
          }
          long y = f * 10 + (s[i] - '0');
          if (ugt(y, U63)) {
            overflow = true;
            continue;
          }
          f = y;
          scale *= 10;
        }
        post = i != fs;
      }
      if (!pre && !post) {
        throw new SyntaxException("invalid duration");
      }
      int us = i;
      for (; i < n && s[i] != '.' && !('0' <= s[i] && s[i] <= '9'); i++) {}
      if (i == us) {
        throw new SyntaxException("missing unit in duration");
      }
      long unit = unit(s, us, i);
      if (unit == 0) {
        throw new SyntaxException("unknown unit in duration");
      }
      if (ugt(v, Long.divideUnsigned(U63, unit))) {
        throw new SyntaxException("invalid duration");
      }
      v *= unit;
      if (f != 0) {
        double frac = u2d(f) * (((double) unit) / scale);
        v += (long) frac; // frac <= 3.6e12: fits
        if (ugt(v, U63)) {
          throw new SyntaxException("invalid duration");
        }
      }
      d += v;
      if (ugt(d, U63)) {
        throw new SyntaxException("invalid duration");
      }
    }
    if (neg) {
      return -d; // -(1<<63) stays Long.MIN_VALUE, as in Go
    }
    if (d < 0) {
      throw new SyntaxException("invalid duration");
    }
    return d;
  }

  /** Go's strconv.ParseInt(s, 10, 64): optional sign, ASCII digits only. */
  static long parseInt64(String s) throws SyntaxException {
    int i = 0;
    int n = s.length();
    boolean neg = false;
    if (n > 0 && (s.charAt(0) == '+' || s.charAt(0) == '-')) {
      neg = s.charAt(0) == '-';
      i++;
    }
    if (i == n) {
      throw new SyntaxException("invalid syntax");
    }
    long limit = neg ? Long.MIN_VALUE : -Long.MAX_VALUE;
    long multmin = limit / 10;
    long acc = 0; // negative accumulation, as Long.parseLong
    for (; i < n; i++) {
      char c = s.charAt(i);
      if (c < '0' || c > '9') {
        throw new SyntaxException("invalid syntax");
      }
      int dgt = c - '0';
      if (acc < multmin) {
        throw new SyntaxException("value out of range");
      }
      acc *= 10;
      if (acc < limit + dgt) {
        throw new SyntaxException("value out of range");
      }
      acc -= dgt;
    }
    return neg ? acc : -acc;
  }

  /** Go's unicode.IsSpace. */
  static boolean isSpace(int c) {
    switch (c) {
      case '\t':
      case '\n':
      case 0x0B:
      case '\f':
      case '\r':
      case ' ':
      case 0x85:
      case 0xA0:
      case 0x1680:
      case 0x2028:
      case 0x2029:
      case 0x202F:
      case 0x205F:
      case 0x3000:
        return true;
      default:
        return c >= 0x2000 && c <= 0x200A;
    }
  }

  /** Go's strings.TrimSpace. */
  static String trimSpace(String s) {
    int a = 0;
    int b = s.length();
    while (a < b && isSpace(s.codePointAt(a))) {
      a += Character.charCount(s.codePointAt(a));
    }
    while (b > a && isSpace(s.codePointBefore(b))) {
      b -= Character.charCount(s.codePointBefore(b));
    }
    return s.substring(a, b);
  }

  private static boolean digit(String s, int i) {
    return i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9';
  }

  private static int num(String s, int from, int to) throws SyntaxException {
    int x = 0;
    for (int i = from; i < to; i++) {
      if (!digit(s, i)) {
        throw new SyntaxException("bad time");
      }
      x = x * 10 + (s.charAt(i) - '0');
    }
    return x;
  }

  /**
   * RFC 3339 as Go's time.Parse(time.RFC3339Nano, v) reads it: the strict form
   * plus what Go's general layout parser also lets through (a one-digit hour,
   * a comma before the fraction, zone offsets up to 24:60). Returns epoch
   * time as {epoch seconds, nanos, year as written}.
   */
  static long[] parseRfc3339(String s) throws SyntaxException {
    int i = 0;
    if (s.length() < 4) {
      throw new SyntaxException("bad time");
    }
    int year = num(s, 0, 4);
    i = 4;
    if (!s.startsWith("-", i)) throw new SyntaxException("bad time");
    int month = num(s, i + 1, i + 3);
    i += 3;
    if (!s.startsWith("-", i)) throw new SyntaxException("bad time");
    int day = num(s, i + 1, i + 3);
    i += 3;
    if (!s.startsWith("T", i)) throw new SyntaxException("bad time");
    i++;
    int hs = i;
    while (digit(s, i) && i - hs < 2) i++;
    if (i == hs) throw new SyntaxException("bad time");
    int hour = num(s, hs, i);
    if (!s.startsWith(":", i)) throw new SyntaxException("bad time");
    int minute = num(s, i + 1, i + 3);
    i += 3;
    if (!s.startsWith(":", i)) throw new SyntaxException("bad time");
    int second = num(s, i + 1, i + 3);
    i += 3;
    int nanos = 0;
    if (i + 1 < s.length() && (s.charAt(i) == '.' || s.charAt(i) == ',') && digit(s, i + 1)) {
      int fs = ++i;
      while (digit(s, i)) i++;
      String frac = s.substring(fs, Math.min(i, fs + 9));
      nanos = Integer.parseInt(frac);
      for (int k = frac.length(); k < 9; k++) nanos *= 10;
    }
    int offset;
    String zone = s.substring(Math.min(i, s.length()));
    if (zone.equals("Z")) {
      offset = 0;
    } else if (zone.length() == 6 && (zone.charAt(0) == '+' || zone.charAt(0) == '-') && zone.charAt(3) == ':') {
      int oh = num(zone, 1, 3);
      int om = num(zone, 4, 6);
      if (oh > 24 || om > 60) throw new SyntaxException("bad zone");
      offset = (oh * 60 + om) * 60 * (zone.charAt(0) == '-' ? -1 : 1);
    } else {
      throw new SyntaxException("bad zone");
    }
    if (month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59) {
      throw new SyntaxException("out of range");
    }
    if (day < 1 || day > LocalDate.of(year, month, 1).lengthOfMonth()) {
      throw new SyntaxException("day out of range");
    }
    long secs = LocalDate.of(year, month, day).atTime(hour, minute, second).toEpochSecond(ZoneOffset.UTC) - offset;
    return new long[] {secs, nanos, year};
  }
}
