package io.github.kdelay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class KdelayInterceptorTest {

  private static KdelayInterceptor<String, String> interceptor(String spec, int k) {
    Map<String, Object> cfg = new HashMap<>();
    cfg.put(KdelayInterceptor.TOPIC_CONFIG, "delay-topic");
    cfg.put(KdelayInterceptor.LEVELS_CONFIG, spec);
    cfg.put(KdelayInterceptor.PARTITIONS_PER_LEVEL_CONFIG, Integer.toString(k));
    cfg.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    KdelayInterceptor<String, String> i = new KdelayInterceptor<>();
    i.configure(cfg);
    return i;
  }

  /**
   * Every parse vector, sent through the interceptor with only headers set:
   * a valid one lands in a partition of its level (keyed ones in the exact
   * partition of the key), an invalid one passes unchanged.
   */
  @TestFactory
  Stream<DynamicTest> placesEveryParseVector() throws Exception {
    return Vectors.section(Vectors.file("parse.json"), "vectors").stream().map(Json::obj).map(v ->
        DynamicTest.dynamicTest("onSend: " + v.get("name"), () -> {
          int k = (int) Vectors.num(v, "per_level") + 2; // k > 1, so the key matters
          KdelayInterceptor<String, String> ic = interceptor((String) v.get("spec"), k);
          long ts = Vectors.num(v, "timestamp_ms");
          if (ts < 0) {
            return; // a Java producer cannot send a timestamp before 1970
          }
          ProducerRecord<String, String> in = new ProducerRecord<>("delay-topic", null, ts, "order-17", "v", Vectors.headers(v.get("headers")));
          ProducerRecord<String, String> out = ic.onSend(in);
          Map<String, Object> want = Json.obj(v.get("want"));
          boolean hasTarget = in.headers().lastHeader(KdelayHeaders.TARGET) != null;
          if (want == null || !hasTarget) {
            assertSame(in, out, "a record the relay dead-letters passes unchanged");
            return;
          }
          int level = (int) Vectors.num(want, "level");
          assertEquals(ic.levels().partitionFor(level, "order-17".getBytes(StandardCharsets.UTF_8)), out.partition());
          assertEquals(level, ic.levels().levelOf(out.partition()));
          assertEquals(ts, out.timestamp());
          assertEquals(Vectors.show(in.headers()), Vectors.show(out.headers()));
          assertEquals("order-17", out.key());
        }));
  }

  @Test
  void otherTopicsAndRecordsWithoutTargetPassUnchanged() {
    KdelayInterceptor<String, String> ic = interceptor(KdelayLevels.DEFAULT_SPEC, 1);
    RecordHeaders hs = new RecordHeaders();
    hs.add(KdelayHeaders.TARGET, "orders".getBytes(StandardCharsets.UTF_8));
    hs.add(KdelayHeaders.DELAY, "90s".getBytes(StandardCharsets.UTF_8));
    ProducerRecord<String, String> other = new ProducerRecord<>("orders", null, null, "k", "v", hs);
    assertSame(other, ic.onSend(other));
    ProducerRecord<String, String> plain = new ProducerRecord<>("delay-topic", "k", "v");
    assertSame(plain, ic.onSend(plain));
  }

  @Test
  void keepsAPartitionOfTheRightLevelAndReplacesAWrongOne() {
    KdelayInterceptor<String, String> ic = interceptor("1s 2s 4s", 3);
    RecordHeaders hs = new RecordHeaders();
    hs.add(KdelayHeaders.TARGET, "orders".getBytes(StandardCharsets.UTF_8));
    hs.add(KdelayHeaders.DELAY, "2s".getBytes(StandardCharsets.UTF_8)); // level 2: partitions 3..5
    for (int p = 0; p < 9; p++) {
      ProducerRecord<String, String> out = ic.onSend(new ProducerRecord<>("delay-topic", p, 1000L, null, "v", hs));
      if (p >= 3 && p < 6) {
        assertEquals(p, out.partition());
      } else {
        assertTrue(out.partition() >= 3 && out.partition() < 6, "partition " + out.partition());
      }
    }
  }

  @Test
  void setsTheTimestampItCountsFrom() {
    KdelayInterceptor<String, String> ic = interceptor(KdelayLevels.DEFAULT_SPEC, 1);
    RecordHeaders hs = new RecordHeaders();
    hs.add(KdelayHeaders.TARGET, "orders".getBytes(StandardCharsets.UTF_8));
    hs.add(KdelayHeaders.DELIVER_AT, Long.toString(System.currentTimeMillis() + 90_000).getBytes(StandardCharsets.UTF_8));
    long before = System.currentTimeMillis();
    ProducerRecord<String, String> out = ic.onSend(new ProducerRecord<>("delay-topic", null, null, "k", "v", hs));
    assertNotNull(out.timestamp());
    assertTrue(out.timestamp() >= before && out.timestamp() <= System.currentTimeMillis());
    // 90 s ahead, give or take the milliseconds of this test: level 5 (1m) -> partition 4.
    assertEquals(4, out.partition());
  }

  @Test
  void byteArrayKeysNeedNoSerializer() {
    Map<String, Object> cfg = new HashMap<>();
    cfg.put(KdelayInterceptor.PARTITIONS_PER_LEVEL_CONFIG, 4);
    KdelayInterceptor<byte[], byte[]> ic = new KdelayInterceptor<>();
    ic.configure(cfg);
    RecordHeaders hs = new RecordHeaders();
    hs.add(KdelayHeaders.TARGET, "orders".getBytes(StandardCharsets.UTF_8));
    hs.add(KdelayHeaders.LEVEL, "3".getBytes(StandardCharsets.UTF_8));
    byte[] key = {(byte) 0xff, 0, (byte) 0x80};
    ProducerRecord<byte[], byte[]> out = ic.onSend(new ProducerRecord<>("delay-topic", null, 5L, key, null, hs));
    assertEquals(ic.levels().partitionFor(3, key), out.partition());
  }

  @Test
  void rejectsBadConfig() {
    KdelayInterceptor<String, String> ic = new KdelayInterceptor<>();
    assertThrows(ConfigException.class, () -> ic.configure(Map.of(KdelayInterceptor.LEVELS_CONFIG, "1s 1s")));
    assertThrows(ConfigException.class, () -> ic.configure(Map.of(KdelayInterceptor.PARTITIONS_PER_LEVEL_CONFIG, "two")));
    assertThrows(ConfigException.class, () -> ic.configure(Map.of(KdelayInterceptor.PARTITIONS_PER_LEVEL_CONFIG, "0")));
  }

  @Test
  void builderIdAndErrors() {
    KdelayLevels t = KdelayLevels.defaults();
    ProducerRecord<String, String> r = KdelayRecord.to("orders").delay(java.time.Duration.ofMillis(1500)).id("reminder-17")
        .timestamp(1000).build(t, "delay-topic", "k", "v");
    assertEquals("reminder-17", KdelayHeaders.lastValue(r.headers(), KdelayHeaders.ID));
    assertEquals("1500", KdelayHeaders.lastValue(r.headers(), KdelayHeaders.DELAY));
    // Sub-millisecond delays round up, as the relay rounds due times up.
    ProducerRecord<String, String> sub = t.delayed("delay-topic", "orders", java.time.Duration.ofNanos(4_999_000_001L), "k", "v");
    assertEquals("5000", KdelayHeaders.lastValue(sub.headers(), KdelayHeaders.DELAY));
    assertEquals(1, sub.partition()); // 5 s: level 2
    assertThrows(IllegalArgumentException.class, () -> KdelayRecord.to("orders").id("").build(t, "delay-topic", "k", "v"));
    assertThrows(IllegalArgumentException.class, () -> KdelayRecord.to("orders").id("x".repeat(256)).build(t, "delay-topic", "k", "v"));
    KdelayRecord.to("orders").id("x".repeat(255)).build(t, "delay-topic", "k", "v");
    KdelayLevels k4 = KdelayLevels.parse(KdelayLevels.DEFAULT_SPEC, 4);
    assertThrows(IllegalArgumentException.class, () -> k4.delayed("delay-topic", "orders", 3, 42L, "v"));
    ProducerRecord<Long, String> lk = KdelayRecord.to("orders").level(3).keyBytes(new byte[] {0, 0, 0, 42}).build(k4, "delay-topic", 42L, "v");
    assertEquals(k4.partitionFor(3, new byte[] {0, 0, 0, 42}), lk.partition());
  }
}
