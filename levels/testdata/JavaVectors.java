import org.apache.kafka.common.utils.Utils;
import java.nio.charset.StandardCharsets;
// Prints the table of levels/java_vectors_test.go (javaVectors).
// Run: javac -cp "lib/*" JavaVectors.java && java -cp "lib/*:." JavaVectors
// with lib/ holding kafka-clients-4.1.0.jar and slf4j-api-1.7.36.jar (Maven Central).
public class JavaVectors {
  public static void main(String[] a) {
    String[] keys = {"", "a", "ab", "abc", "abcd", "abcde", "order-17", "order-18", "user:42", "0", "1", "2", "3", "kdelay", "some longer key of 33 bytes .....", "\u00e9t\u00e9", "\u65e5\u672c"};
    int[] ks = {2, 3, 4, 7, 16};
    for (String k : keys) {
      byte[] b = k.getBytes(StandardCharsets.UTF_8);
      int h = Utils.murmur2(b);
      StringBuilder sb = new StringBuilder();
      for (int n : ks) { sb.append(", ").append(Utils.toPositive(h) % n); }
      System.out.printf("{%s, %d%s},%n", goq(k), h, sb);
    }
    // binary keys
    byte[][] bins = {{(byte)0xff}, {(byte)0x80,0,0,0}, {0,0,0,0,0}, {(byte)0xde,(byte)0xad,(byte)0xbe,(byte)0xef,1,2,3}};
    for (byte[] b : bins) {
      int h = Utils.murmur2(b);
      StringBuilder sb = new StringBuilder();
      for (int n : ks) { sb.append(", ").append(Utils.toPositive(h) % n); }
      StringBuilder q = new StringBuilder("\"");
      for (byte x : b) q.append(String.format("\\x%02x", x & 0xff));
      q.append("\"");
      System.out.printf("{%s, %d%s},%n", q, h, sb);
    }
  }
  static String goq(String s) { return "\"" + s.replace("\\","\\\\").replace("\"","\\\"") + "\""; }
}
