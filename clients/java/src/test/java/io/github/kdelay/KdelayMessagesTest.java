package io.github.kdelay;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.kafka.support.JsonKafkaHeaderMapper;
import org.springframework.kafka.support.KafkaHeaderMapper;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.kafka.support.KafkaNull;
import org.springframework.kafka.support.SimpleKafkaHeaderMapper;
import org.springframework.kafka.support.converter.MessagingMessageConverter;
import org.springframework.messaging.Message;

/** KdelayMessages: the Message it builds, and the record Spring Kafka makes of it. */
class KdelayMessagesTest {
  private static final KdelayLevels LEVELS = KdelayLevels.parse("1s 5s 10s", 2);

  /** The record KafkaTemplate.send(Message) would produce, with this header mapper. */
  private static ProducerRecord<?, ?> toRecord(Message<?> m, KafkaHeaderMapper mapper) {
    MessagingMessageConverter c = new MessagingMessageConverter();
    c.setHeaderMapper(mapper);
    return c.fromMessage(m, null);
  }

  @Test
  void theRecordSpringMakesIsTheRecordKdelayRecordBuilds() throws ContractException {
    for (KafkaHeaderMapper mapper : List.of(new SimpleKafkaHeaderMapper(), new JsonKafkaHeaderMapper())) {
      Message<?> m = KdelayMessages.to("orders").delay(Duration.ofMillis(7500)).id("order-17").targetPartition(2)
          .timestamp(1_000).header("trace", "t-17").build(LEVELS, "delay-topic", "order-17", "payload");
      ProducerRecord<?, ?> want = KdelayRecord.to("orders").delay(Duration.ofMillis(7500)).id("order-17").targetPartition(2)
          .timestamp(1_000).header("trace", "t-17").build(LEVELS, "delay-topic", "order-17", "payload");
      ProducerRecord<?, ?> got = toRecord(m, mapper);
      String name = mapper.getClass().getSimpleName();
      assertEquals(want.topic(), got.topic(), name);
      assertEquals(want.partition(), got.partition(), name);
      assertEquals(want.key(), got.key(), name);
      assertEquals(want.value(), got.value(), name);
      assertEquals(want.timestamp(), got.timestamp(), name);
      // Header order: a Message's headers are a map; compare sorted.
      assertEquals(sorted(want), sorted(got), name);
      Schedule s = LEVELS.parseHeaders(got.headers(), got.timestamp());
      assertEquals(2, s.level(), name + ": 7.5 s is level 2 (5s: the largest not above)");
      assertEquals(8_500, s.dueMs(), name);
    }
  }

  @Test
  void kdelayHeadersAreBytes() {
    Message<?> m = KdelayMessages.to("orders").at(Instant.ofEpochMilli(12_000)).timestamp(1_000)
        .build(LEVELS, "delay-topic", "k", "v");
    assertArrayEquals("orders".getBytes(UTF_8), (byte[]) m.getHeaders().get(KdelayHeaders.TARGET));
    assertArrayEquals("12000".getBytes(UTF_8), (byte[]) m.getHeaders().get(KdelayHeaders.DELIVER_AT));
    assertEquals("delay-topic", m.getHeaders().get(KafkaHeaders.TOPIC));
    assertEquals("k", m.getHeaders().get(KafkaHeaders.KEY));
    assertEquals(1_000L, m.getHeaders().get(KafkaHeaders.TIMESTAMP));
    assertEquals(LEVELS.partitionFor(3, "k".getBytes(UTF_8)), m.getHeaders().get(KafkaHeaders.PARTITION));
  }

  @Test
  void levelAndTombstone() {
    Message<?> m = KdelayMessages.to("orders").level(1).build(LEVELS, "delay-topic", null, null);
    assertSame(KafkaNull.INSTANCE, m.getPayload());
    assertArrayEquals("1".getBytes(UTF_8), (byte[]) m.getHeaders().get(KdelayHeaders.LEVEL));
    assertTrue(!m.getHeaders().containsKey(KafkaHeaders.KEY));
    ProducerRecord<?, ?> r = toRecord(m, new SimpleKafkaHeaderMapper());
    assertEquals(null, r.value());
    assertEquals(1, LEVELS.levelOf(r.partition()), "a null key: any partition of level 1, got " + r.partition());
    assertEquals(r.partition(), m.getHeaders().get(KafkaHeaders.PARTITION));
  }

  @Test
  void badInputIsRefusedAsKdelayRecordRefusesIt() {
    assertThrows(IllegalArgumentException.class,
        () -> KdelayMessages.to("bad topic").delay(Duration.ofSeconds(1)).build(LEVELS, "delay-topic", "k", "v"));
    assertThrows(IllegalArgumentException.class,
        () -> KdelayMessages.to("orders").delay(Duration.ofSeconds(1)).level(2).build(LEVELS, "delay-topic", "k", "v"));
    assertThrows(IllegalArgumentException.class,
        () -> KdelayMessages.to("orders").level(4).build(LEVELS, "delay-topic", "k", "v"));
  }

  /**
   * spring-kafka is an optional dependency: no class of the library but
   * KdelayMessages may refer to a Spring class, or a producer without Spring
   * would fail to load it.
   */
  @Test
  void onlyKdelayMessagesRefersToSpring() throws IOException {
    Path classes = Path.of(KdelayRecord.class.getProtectionDomain().getCodeSource().getLocation().getPath());
    List<String> checked = new ArrayList<>();
    List<String> offending = new ArrayList<>();
    try (Stream<Path> files = Files.walk(classes)) {
      for (Path f : files.filter(p -> p.toString().endsWith(".class")).toList()) {
        String name = classes.relativize(f).toString();
        if (name.startsWith("io/github/kdelay/KdelayMessages")) continue;
        checked.add(name);
        if (new String(Files.readAllBytes(f), java.nio.charset.StandardCharsets.ISO_8859_1).contains("org/springframework")) {
          offending.add(name);
        }
      }
    }
    assertTrue(checked.contains("io/github/kdelay/KdelayInterceptor.class"), "classes found under " + classes + ": " + checked);
    assertEquals(List.of(), offending, "classes referring to Spring");
  }

  private static List<String> sorted(ProducerRecord<?, ?> r) {
    List<String> l = new ArrayList<>();
    r.headers().forEach(h -> l.add(h.key() + "=" + new String(h.value(), UTF_8)));
    l.sort(null);
    return l;
  }
}
