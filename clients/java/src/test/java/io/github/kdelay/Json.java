package io.github.kdelay;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A small JSON reader for the shared vectors (the project depends on kafka-clients only). */
final class Json {
  private final String s;
  private int i;

  private Json(String s) {
    this.s = s;
  }

  static Object read(Path p) throws IOException {
    Json j = new Json(Files.readString(p, StandardCharsets.UTF_8));
    Object v = j.value();
    j.ws();
    if (j.i != j.s.length()) {
      throw j.err("trailing data");
    }
    return v;
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> obj(Object o) {
    return (Map<String, Object>) o;
  }

  @SuppressWarnings("unchecked")
  static List<Object> list(Object o) {
    return o == null ? List.of() : (List<Object>) o;
  }

  private IllegalStateException err(String m) {
    return new IllegalStateException("json: " + m + " at offset " + i);
  }

  private void ws() {
    while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++;
  }

  private Object value() {
    ws();
    if (i >= s.length()) throw err("unexpected end");
    char c = s.charAt(i);
    switch (c) {
      case '{': {
        i++;
        Map<String, Object> m = new LinkedHashMap<>();
        ws();
        if (s.charAt(i) == '}') {
          i++;
          return m;
        }
        while (true) {
          ws();
          String k = string();
          ws();
          expect(':');
          m.put(k, value());
          ws();
          if (s.charAt(i) == ',') {
            i++;
            continue;
          }
          expect('}');
          return m;
        }
      }
      case '[': {
        i++;
        List<Object> l = new ArrayList<>();
        ws();
        if (s.charAt(i) == ']') {
          i++;
          return l;
        }
        while (true) {
          l.add(value());
          ws();
          if (s.charAt(i) == ',') {
            i++;
            continue;
          }
          expect(']');
          return l;
        }
      }
      case '"':
        return string();
      case 't':
        lit("true");
        return Boolean.TRUE;
      case 'f':
        lit("false");
        return Boolean.FALSE;
      case 'n':
        lit("null");
        return null;
      default:
        int st = i;
        while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
        String num = s.substring(st, i);
        if (num.isEmpty()) throw err("unexpected character " + c);
        if (num.contains(".") || num.contains("e") || num.contains("E")) throw err("non-integer number " + num);
        return Long.parseLong(num);
    }
  }

  private void lit(String w) {
    if (!s.startsWith(w, i)) throw err("expected " + w);
    i += w.length();
  }

  private void expect(char c) {
    if (i >= s.length() || s.charAt(i) != c) throw err("expected " + c);
    i++;
  }

  private String string() {
    expect('"');
    StringBuilder b = new StringBuilder();
    while (true) {
      char c = s.charAt(i++);
      if (c == '"') return b.toString();
      if (c != '\\') {
        b.append(c);
        continue;
      }
      char e = s.charAt(i++);
      switch (e) {
        case '"': b.append('"'); break;
        case '\\': b.append('\\'); break;
        case '/': b.append('/'); break;
        case 'b': b.append('\b'); break;
        case 'f': b.append('\f'); break;
        case 'n': b.append('\n'); break;
        case 'r': b.append('\r'); break;
        case 't': b.append('\t'); break;
        case 'u':
          b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
          i += 4;
          break;
        default: throw err("bad escape \\" + e);
      }
    }
  }
}
