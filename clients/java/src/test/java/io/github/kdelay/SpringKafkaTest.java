package io.github.kdelay;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.support.JacksonPresent;
import org.springframework.kafka.support.JsonKafkaHeaderMapper;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.kafka.support.ProducerListener;
import org.springframework.kafka.support.SimpleKafkaHeaderMapper;
import org.springframework.kafka.support.converter.MessagingMessageConverter;
import org.springframework.messaging.support.MessageBuilder;

/**
 * Spring Kafka's KafkaTemplate through a running relay on a real broker, as
 * docs/producing.md shows it (DocsSpringTest holds its marked Java blocks to
 * this file): each record shape, and where it ends up (the target
 * or the dead-letter topic, with which reason and which headers).
 *
 * <p>pom.xml runs it twice: with Jackson 3 on the classpath
 * (kdelay.spring.jackson=true; Spring Kafka then maps Message headers with
 * JsonKafkaHeaderMapper) and without (false; SimpleKafkaHeaderMapper). It
 * checks that the classpath is the one announced. Needs KDELAY_TEST_BROKERS
 * and KDELAY_BIN as RelayIntegrationTest does.
 */
class SpringKafkaTest {
  /** Lateness bound on a shared 2-core CI machine, as in RelayIntegrationTest. */
  private static final long LATE_MS = 5_000;

  @TempDir Path tmp;

  /**
   * Where a key must end up: at the target (error null) or dead-lettered with
   * this kdelay-error (the relay's error; its metrics label the reason), with
   * these header keys (in any order: a Message's headers are a map) and values.
   */
  private record Expect(String error, List<String> headerKeys, Map<String, String> values) {}

  @Test
  void kafkaTemplateThroughTheRelay() throws Exception {
    String mode = System.getProperty("kdelay.spring.jackson");
    if (!"true".equals(mode) && !"false".equals(mode)) {
      fail("kdelay.spring.jackson must be true or false (pom.xml sets it): run through mvn test");
    }
    boolean jackson = Boolean.parseBoolean(mode);
    assertEquals(jackson, JacksonPresent.isJackson3Present(), "Jackson 3 on the classpath");
    assertEquals(false, JacksonPresent.isJackson2Present(), "Jackson 2 on the classpath");

    TestRelay.Env te = TestRelay.env();
    String brokers = te.brokers();
    String id = UUID.randomUUID().toString().substring(0, 8);
    String delayTopic = "spring-delay-" + id;
    String target = "spring-target-" + id;
    String kdelayLevels = "1s 2s";
    Map<String, String> env = TestRelay.settings(brokers, delayTopic, "spring-kdelay-" + id, kdelayLevels, 1);
    TestRelay.run(te.bin(), env, "topic", "create");
    try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, brokers))) {
      admin.createTopics(List.of(new NewTopic(target, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
      TestRelay.awaitTopics(admin, Map.of(delayTopic, 2, delayTopic + ".dlq", 1, target, 1));
      Process relay = TestRelay.start(te.bin(), env, tmp);
      try {
        Map<String, Expect> want = new LinkedHashMap<>();
        Map<String, RecordMetadata> sent = send(brokers, delayTopic, target, kdelayLevels, jackson, want);
        check(brokers, admin, env.get("KDELAY_GROUP"), delayTopic, target, jackson, want, sent);
      } finally {
        TestRelay.stop(relay);
        admin.deleteTopics(List.of(delayTopic, delayTopic + ".dlq", target)).all().get(30, TimeUnit.SECONDS);
      }
    }
  }

  /** The headers the relay adds to a forwarded record, and to a dead letter. */
  private static final List<String> FORWARDED = List.of(KdelayHeaders.DUE_AT, KdelayHeaders.SOURCE);
  private static final List<String> DEAD = List.of(KdelayHeaders.ERROR, KdelayHeaders.SOURCE, "kdelay-original-timestamp");

  private static List<String> keys(List<String> own, String... more) {
    List<String> l = new ArrayList<>(own);
    l.addAll(List.of(more));
    return l;
  }

  /** Sends every shape through KafkaTemplate; fills want; returns each key's ack. */
  private Map<String, RecordMetadata> send(String brokers, String delayTopic, String target, String kdelayLevels,
      boolean jackson, Map<String, Expect> want) throws Exception {
    Map<String, RecordMetadata> acks = new ConcurrentHashMap<>();
    Map<String, Exception> failed = new ConcurrentHashMap<>();
    ProducerListener<String, String> listener = new ProducerListener<>() {
      @Override
      public void onSuccess(ProducerRecord<String, String> r, RecordMetadata md) {
        acks.put(r.key(), md);
      }

      @Override
      public void onError(ProducerRecord<String, String> r, RecordMetadata md, Exception e) {
        failed.put(String.valueOf(r.key()), e);
      }
    };
    String payload = "{\"id\":17}";

    // docs/producing.md, Spring Kafka: the producer factory and the template.
    Map<String, Object> props = new HashMap<>();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
    props.put(ProducerConfig.INTERCEPTOR_CLASSES_CONFIG, KdelayInterceptor.class.getName());
    props.put(KdelayInterceptor.TOPIC_CONFIG, delayTopic);
    props.put(KdelayInterceptor.LEVELS_CONFIG, kdelayLevels); // = KDELAY_LEVELS; omit for the default levels
    KafkaTemplate<String, String> template = new KafkaTemplate<>(new DefaultKafkaProducerFactory<>(props));
    KdelayLevels levels = KdelayLevels.parse(kdelayLevels, 1); // = KDELAY_LEVELS, KDELAY_PARTITIONS_PER_LEVEL
    template.setProducerListener(listener);

    // 1. a ProducerRecord with byte[] headers
    ProducerRecord<String, String> rec = new ProducerRecord<>(delayTopic, "order-17", payload);
    rec.headers().add(KdelayHeaders.TARGET, target.getBytes(UTF_8))
        .add(KdelayHeaders.DELAY, "2s".getBytes(UTF_8));
    rec.headers().add("trace", "t-17".getBytes(UTF_8));
    template.send(rec);
    want.put("order-17", new Expect(null, keys(List.of("trace"), FORWARDED.toArray(String[]::new)), Map.of("trace", "t-17")));

    // 2. a Message built by KdelayMessages: byte[] headers and the partition
    template.send(KdelayMessages.to(target).delay(Duration.ofSeconds(2)).id("order-18")
        .header("trace", "t-18")
        .build(levels, delayTopic, "order-18", payload));
    want.put("order-18", new Expect(null, keys(List.of("trace"), KdelayHeaders.DUE_AT, KdelayHeaders.SOURCE, KdelayHeaders.ID),
        Map.of("trace", "t-18", KdelayHeaders.ID, "order-18")));

    // 3. a Message from MessageBuilder with byte[] kdelay headers
    template.send(MessageBuilder.withPayload(payload)
        .setHeader(KafkaHeaders.TOPIC, delayTopic)
        .setHeader(KafkaHeaders.KEY, "order-19")
        .setHeader(KdelayHeaders.TARGET, target.getBytes(UTF_8))
        .setHeader(KdelayHeaders.DELAY, "2s".getBytes(UTF_8))
        .setHeader("trace", "t-19".getBytes(UTF_8))
        .build());
    want.put("order-19", new Expect(null, keys(List.of("trace"), FORWARDED.toArray(String[]::new)), Map.of("trace", "t-19")));

    // docs/producing.md: 4. a Message with String header values
    template.send(MessageBuilder.withPayload(payload)
        .setHeader(KafkaHeaders.TOPIC, delayTopic)
        .setHeader(KafkaHeaders.KEY, "order-20")
        .setHeader(KdelayHeaders.TARGET, target)
        .setHeader(KdelayHeaders.DELAY, "2s")
        .setHeader("trace", "t-20")
        .build());
    if (jackson) {
      // JsonKafkaHeaderMapper writes Strings as raw UTF-8 and names their
      // type in spring_json_header_types, which travels to the target.
      want.put("order-20", new Expect(null, keys(List.of("trace", JsonKafkaHeaderMapper.JSON_TYPES), FORWARDED.toArray(String[]::new)),
          Map.of("trace", "t-20")));
    } else {
      // SimpleKafkaHeaderMapper drops String values: no kdelay header is left.
      want.put("order-20", new Expect("levels: missing target: header kdelay-target=\"\"", DEAD, Map.of()));
    }

    // docs/producing.md: String values mapped as UTF-8 without Jackson
    SimpleKafkaHeaderMapper mapper = new SimpleKafkaHeaderMapper();
    mapper.setMapAllStringsOut(true);
    MessagingMessageConverter converter = new MessagingMessageConverter();
    converter.setHeaderMapper(mapper);
    KafkaTemplate<String, String> stringTemplate = new KafkaTemplate<>(new DefaultKafkaProducerFactory<>(props));
    stringTemplate.setMessageConverter(converter);
    stringTemplate.setProducerListener(listener);
    stringTemplate.send(MessageBuilder.withPayload(payload)
        .setHeader(KafkaHeaders.TOPIC, delayTopic)
        .setHeader(KafkaHeaders.KEY, "order-21")
        .setHeader(KdelayHeaders.TARGET, target)
        .setHeader(KdelayHeaders.DELAY, "2s")
        .setHeader("trace", "t-21")
        .build());
    want.put("order-21", new Expect(null, keys(List.of("trace"), FORWARDED.toArray(String[]::new)), Map.of("trace", "t-21")));

    KafkaTemplate<String, String> jsonTemplate = null;
    if (jackson) {
      // JSON-encoded Strings (encodeStrings, the mapping of spring-kafka
      // before 2.3): "\"orders\"" is no topic name; the relay does not unquote.
      JsonKafkaHeaderMapper json = new JsonKafkaHeaderMapper();
      json.setEncodeStrings(true);
      MessagingMessageConverter jsonConverter = new MessagingMessageConverter();
      jsonConverter.setHeaderMapper(json);
      jsonTemplate = new KafkaTemplate<>(new DefaultKafkaProducerFactory<>(props));
      jsonTemplate.setMessageConverter(jsonConverter);
      jsonTemplate.setProducerListener(listener);
      jsonTemplate.send(MessageBuilder.withPayload(payload)
          .setHeader(KafkaHeaders.TOPIC, delayTopic)
          .setHeader(KafkaHeaders.KEY, "order-22")
          .setHeader(KdelayHeaders.TARGET, target)
          .setHeader(KdelayHeaders.DELAY, "2s")
          .build());
      want.put("order-22", new Expect("levels: invalid target topic: header kdelay-target=\"\\\"" + target + "\\\"\"",
          keys(List.of(KdelayHeaders.TARGET, KdelayHeaders.DELAY, JsonKafkaHeaderMapper.JSON_TYPES), DEAD.toArray(String[]::new)),
          Map.of(KdelayHeaders.TARGET, "\"" + target + "\"")));
    }

    for (KafkaTemplate<String, String> t : jackson ? List.of(template, stringTemplate, jsonTemplate) : List.of(template, stringTemplate)) {
      t.flush();
      t.getProducerFactory().reset(); // closes its producer
    }
    if (!failed.isEmpty()) fail("sends failed: " + failed);
    assertEquals(want.keySet(), acks.keySet(), "acked keys");
    return acks;
  }

  private void check(String brokers, Admin admin, String group, String delayTopic, String target, boolean jackson,
      Map<String, Expect> want, Map<String, RecordMetadata> sent) throws Exception {
    String dlq = delayTopic + ".dlq";
    Properties cp = new Properties();
    cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    Map<String, List<ConsumerRecord<String, String>>> got = new TreeMap<>();
    long deadline = System.currentTimeMillis() + 60_000;
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
      List<TopicPartition> tps = List.of(new TopicPartition(target, 0), new TopicPartition(dlq, 0));
      consumer.assign(tps);
      consumer.seekToBeginning(tps);
      while (got.size() < want.size() && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          got.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r);
        }
      }
      // Once: the relay has committed the whole delay topic, so nothing more
      // can come; read both topics to their end.
      TestRelay.awaitCommitted(admin, group, delayTopic, deadline);
      Map<TopicPartition, Long> end = consumer.endOffsets(tps);
      while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))) {
        if (System.currentTimeMillis() > deadline) fail("target and dead-letter topic not read to their end offsets " + end);
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          got.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r);
        }
      }
    }
    assertEquals(want.keySet(), got.keySet(), "keys at the target or the dead-letter topic");
    List<String> problems = new ArrayList<>();
    StringBuilder summary = new StringBuilder();
    for (Map.Entry<String, Expect> e : want.entrySet()) {
      String key = e.getKey();
      Expect x = e.getValue();
      List<ConsumerRecord<String, String>> rs = got.get(key);
      if (rs.size() != 1) {
        problems.add(key + ": arrived " + rs.size() + " times");
      }
      ConsumerRecord<String, String> r = rs.get(0);
      String wantTopic = x.error() == null ? target : dlq;
      if (!r.topic().equals(wantTopic)) {
        problems.add(key + ": at " + r.topic() + " (" + KdelayHeaders.lastValue(r.headers(), KdelayHeaders.ERROR) + "), want " + wantTopic);
        continue;
      }
      List<String> hkeys = new ArrayList<>();
      for (Header h : r.headers()) hkeys.add(h.key());
      if (!new TreeSet<>(hkeys).equals(new TreeSet<>(x.headerKeys())) || hkeys.size() != x.headerKeys().size()) {
        problems.add(key + ": headers\n" + Vectors.show(r.headers()) + "want keys " + x.headerKeys());
      }
      for (Map.Entry<String, String> v : x.values().entrySet()) {
        String have = KdelayHeaders.lastValue(r.headers(), v.getKey());
        if (!v.getValue().equals(have)) problems.add(key + ": header " + v.getKey() + "=" + have + ", want " + v.getValue());
      }
      if (x.error() == null) {
        long due = sent.get(key).timestamp() + 2_000;
        String dueAt = KdelayHeaders.lastValue(r.headers(), KdelayHeaders.DUE_AT);
        if (!Long.toString(due).equals(dueAt)) problems.add(key + ": kdelay-due-at " + dueAt + ", want " + due);
        long late = r.timestamp() - due;
        if (late < 0) problems.add(key + ": forwarded " + (-late) + " ms early");
        if (late > LATE_MS) problems.add(key + ": forwarded " + late + " ms late");
        summary.append(String.format(" %s: delivered (%d ms late);", key, late));
      } else {
        String error = KdelayHeaders.lastValue(r.headers(), KdelayHeaders.ERROR);
        if (!x.error().equals(error)) problems.add(key + ": dead-lettered with kdelay-error " + error + ", want " + x.error());
        summary.append(String.format(" %s: dead-lettered (%s);", key, error));
      }
    }
    if (jackson && got.get("order-20") != null) {
      // A Spring consumer of the target reads the forwarded String header
      // back as a String: spring_json_header_types still describes it.
      Map<String, Object> in = new HashMap<>();
      new JsonKafkaHeaderMapper().toHeaders(got.get("order-20").get(0).headers(), in);
      if (!"t-20".equals(in.get("trace"))) problems.add("order-20: a Spring consumer maps trace to " + in.get("trace"));
    }
    if (!problems.isEmpty()) {
      fail(problems.size() + " problems:\n" + String.join("\n", problems));
    }
    System.out.printf("SpringKafkaTest (Jackson %s):%s%n", jackson ? "on the classpath" : "absent", summary);
  }
}
