package io.github.kdelay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * End to end through a real broker and a running relay: records sent by a
 * plain KafkaProducer with the interceptor and only headers set (no
 * partition), and one built by KdelayRecord with a kdelay-id, are delivered
 * once each, never before their due time and at most LATE_MS after it, with
 * the producer's own headers intact.
 *
 * <p>Needs KDELAY_TEST_BROKERS (e.g. from .ci/kafka.sh env) and KDELAY_BIN
 * (a built kdelay binary). Skipped without them, except under CI=true, where
 * a skip would hide the test and is a failure.
 */
class RelayIntegrationTest {
  /** Lateness bound on a shared 2-core CI machine; the relay's p99 is far below. */
  private static final long LATE_MS = 5_000;

  private static final String LEVELS = "1s 2s 4s";
  private static final int K = 2;

  @TempDir Path tmp;

  @Test
  void interceptorAndBuilderRecordsAreDeliveredOnceOnTimeWithTheirHeaders() throws Exception {
    TestRelay.Env te = TestRelay.env();
    String brokers = te.brokers();
    String bin = te.bin();
    String id = UUID.randomUUID().toString().substring(0, 8);
    String delayTopic = "java-delay-" + id;
    String target = "java-target-" + id;
    Map<String, String> env = TestRelay.settings(brokers, delayTopic, "java-kdelay-" + id, LEVELS, K);

    TestRelay.run(bin, env, "topic", "create");
    try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, brokers))) {
      admin.createTopics(List.of(new NewTopic(target, 3, (short) 1))).all().get(30, TimeUnit.SECONDS);
      TestRelay.awaitTopics(admin, Map.of(delayTopic, KdelayLevels.parse(LEVELS, K).partitions(), delayTopic + ".dlq", 1, target, 3));
      Process relay = TestRelay.start(bin, env, tmp);
      try {
        check(brokers, admin, env.get("KDELAY_GROUP"), delayTopic, target);
      } finally {
        TestRelay.stop(relay);
        admin.deleteTopics(List.of(delayTopic, delayTopic + ".dlq", target)).all().get(30, TimeUnit.SECONDS);
      }
    }
  }

  /** A record the test sent: what it must look like on arrival. */
  private record Sent(String key, long dueMs, int expectLevel, List<Header> ownHeaders) {}

  private void check(String brokers, Admin admin, String group, String delayTopic, String target) throws Exception {
    KdelayLevels levels = KdelayLevels.parse(LEVELS, K);
    Properties pp = new Properties();
    pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    pp.put(ProducerConfig.INTERCEPTOR_CLASSES_CONFIG, KdelayInterceptor.class.getName());
    pp.put(KdelayInterceptor.TOPIC_CONFIG, delayTopic);
    pp.put(KdelayInterceptor.LEVELS_CONFIG, LEVELS);
    pp.put(KdelayInterceptor.PARTITIONS_PER_LEVEL_CONFIG, Integer.toString(K));
    pp.put(ProducerConfig.ACKS_CONFIG, "all");

    Map<String, Sent> sent = new LinkedHashMap<>();
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
      // Only headers, no partition: the interceptor places them.
      String[][] schedules = {
        {KdelayHeaders.DELAY, "1s"}, {KdelayHeaders.DELAY, "2500ms"}, {KdelayHeaders.DELAY, "4000"},
        {KdelayHeaders.LEVEL, "2"}, {KdelayHeaders.DELIVER_AT, null},
      };
      for (int i = 0; i < schedules.length; i++) {
        for (int j = 0; j < 4; j++) {
          String key = "java-icpt-" + i + "-" + j;
          RecordHeaders hs = new RecordHeaders();
          hs.add("trace", ("t-" + key).getBytes(StandardCharsets.UTF_8));
          hs.add(KdelayHeaders.TARGET, target.getBytes(StandardCharsets.UTF_8));
          String v = schedules[i][1] != null ? schedules[i][1] : Long.toString(System.currentTimeMillis() + 3_000);
          hs.add(schedules[i][0], v.getBytes(StandardCharsets.UTF_8));
          hs.add("bin", new byte[] {0, (byte) 0xff, (byte) j});
          hs.add("trace", "second".getBytes(StandardCharsets.UTF_8));
          RecordMetadata md = producer.send(new ProducerRecord<>(delayTopic, null, null, key, "value-" + key, hs)).get(30, TimeUnit.SECONDS);
          Schedule s = levels.parseHeaders(hs, md.timestamp());
          assertEquals(s.level(), levels.levelOf(md.partition()), key + ": the interceptor put it in partition " + md.partition());
          assertEquals(levels.partitionFor(s.level(), key.getBytes(StandardCharsets.UTF_8)), md.partition(), key + ": not the key's partition");
          sent.put(key, new Sent(key, s.dueMs(), s.level(), List.of(hs.toArray())));
        }
      }
      // The builder, with kdelay-id and an own header.
      for (int j = 0; j < 4; j++) {
        String key = "java-builder-" + j;
        ProducerRecord<String, String> rec = KdelayRecord.to(target).delay(Duration.ofMillis(1500)).id("schedule-" + key)
            .header("trace", "b-" + key).build(levels, delayTopic, key, "value-" + key);
        RecordMetadata md = producer.send(rec).get(30, TimeUnit.SECONDS);
        Schedule s = levels.parseHeaders(rec.headers(), md.timestamp());
        sent.put(key, new Sent(key, s.dueMs(), s.level(), List.of(rec.headers().toArray())));
      }
    }
    long lastDue = sent.values().stream().mapToLong(Sent::dueMs).max().orElseThrow();

    Properties cp = new Properties();
    cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    Map<String, List<ConsumerRecord<String, String>>> got = new HashMap<>();
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
      List<TopicPartition> tps = consumer.partitionsFor(target).stream()
          .map(p -> new TopicPartition(target, p.partition())).collect(Collectors.toList());
      consumer.assign(tps);
      consumer.seekToBeginning(tps);
      long deadline = lastDue + 60_000;
      while (got.size() < sent.size() && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          got.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r);
        }
      }
      assertEquals(sent.keySet(), got.keySet(), "delivered keys");
      // Delivered once: wait until the relay has committed all of the delay
      // topic (nothing left it could forward again), then read the target to
      // its end and count.
      TestRelay.awaitCommitted(admin, group, delayTopic, deadline);
      Map<TopicPartition, Long> end = consumer.endOffsets(tps);
      while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))) {
        if (System.currentTimeMillis() > deadline) fail("target not read to its end offsets " + end);
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          got.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r);
        }
      }
    }
    List<String> problems = new ArrayList<>();
    for (Sent s : sent.values()) {
      List<ConsumerRecord<String, String>> rs = got.get(s.key());
      if (rs.size() != 1) {
        problems.add(s.key() + ": delivered " + rs.size() + " times");
      }
      ConsumerRecord<String, String> r = rs.get(0);
      long late = r.timestamp() - s.dueMs();
      if (late < 0) problems.add(s.key() + ": forwarded " + (-late) + " ms early");
      if (late > LATE_MS) problems.add(s.key() + ": forwarded " + late + " ms late");
      if (!r.value().equals("value-" + s.key())) problems.add(s.key() + ": value " + r.value());
      String source = KdelayHeaders.lastValue(r.headers(), KdelayHeaders.SOURCE);
      String want = Vectors.show(KdelayHeaders.forwarded(s.ownHeaders(), s.dueMs(), source == null ? "" : source));
      if (!want.equals(Vectors.show(r.headers()))) {
        problems.add(s.key() + ": headers\n" + Vectors.show(r.headers()) + "want\n" + want);
      }
      if (source == null || !source.startsWith(delayTopic + "/")) problems.add(s.key() + ": kdelay-source " + source);
    }
    if (!problems.isEmpty()) {
      fail(problems.size() + " problems:\n" + String.join("\n", problems));
    }
    System.out.printf("RelayIntegrationTest: %d records delivered once, none early, lateness max %d ms%n", sent.size(),
        got.values().stream().mapToLong(rs -> rs.get(0).timestamp() - sent.get(rs.get(0).key()).dueMs()).max().orElse(0));
  }
}
