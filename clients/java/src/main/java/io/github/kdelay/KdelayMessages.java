package io.github.kdelay;

import java.time.Duration;
import java.time.Instant;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.kafka.support.KafkaNull;
import org.springframework.messaging.Message;
import org.springframework.messaging.support.MessageBuilder;

/**
 * Builds a delayed record as a Spring {@link Message} for
 * {@code KafkaTemplate.send(Message)}: the kdelay headers as {@code byte[]}
 * (which every Spring Kafka header mapper writes unchanged, with or without
 * Jackson), the delay topic, the key, the record timestamp and the partition
 * of the record's level. The Spring counterpart of {@link KdelayRecord},
 * whose methods it mirrors.
 *
 * <pre>{@code
 * KdelayLevels levels = KdelayLevels.defaults(); // or parse(KDELAY_LEVELS, k)
 * kafkaTemplate.send(KdelayMessages.to("orders")
 *     .delay(Duration.ofSeconds(90))   // or .at(Instant) or .level(5)
 *     .id("order-17")                  // optional kdelay-id
 *     .header("trace", traceId)        // your own headers travel along
 *     .build(levels, "delay-topic", "order-17", payload));
 * }</pre>
 *
 * <p>Needs spring-kafka on the classpath: an optional dependency of this
 * library, which no other class of it loads. A Message's headers are a map,
 * so an own header added twice keeps its last value, and a null header
 * value becomes an empty one. Not thread-safe; one
 * builder per message.
 */
public final class KdelayMessages {
  private final KdelayRecord record;

  private KdelayMessages(String target) {
    this.record = KdelayRecord.to(target);
  }

  /** A message to be delivered to target. */
  public static KdelayMessages to(String target) {
    return new KdelayMessages(target);
  }

  /** Deliver after delay (counted from the record timestamp; rounded up to the ms). */
  public KdelayMessages delay(Duration delay) {
    record.delay(delay);
    return this;
  }

  /** Deliver at an absolute time (rounded up to the ms). */
  public KdelayMessages at(Instant at) {
    record.at(at);
    return this;
  }

  /** Deliver after the duration of a level (1..levels), RocketMQ style. */
  public KdelayMessages level(int level) {
    record.level(level);
    return this;
  }

  /** The partition of the target topic; by default the key decides. */
  public KdelayMessages targetPartition(int partition) {
    record.targetPartition(partition);
    return this;
  }

  /** The schedule id, {@code kdelay-id} (1-255 bytes of UTF-8), for cancel and reschedule. */
  public KdelayMessages id(String id) {
    record.id(id);
    return this;
  }

  /** The record timestamp, epoch ms (default: now, when built). */
  public KdelayMessages timestamp(long epochMs) {
    record.timestamp(epochMs);
    return this;
  }

  /** The serialized key, as {@link KdelayRecord#keyBytes}. */
  public KdelayMessages keyBytes(byte[] keyBytes) {
    record.keyBytes(keyBytes);
    return this;
  }

  /** One of your own headers; delivered unchanged. */
  public KdelayMessages header(String key, byte[] value) {
    record.header(key, value);
    return this;
  }

  /** One of your own headers, as UTF-8 bytes (so that no header mapper drops or re-encodes it). */
  public KdelayMessages header(String key, String value) {
    record.header(key, value);
    return this;
  }

  /**
   * The message for delayTopic, partitioned by levels. A null payload
   * becomes {@link KafkaNull#INSTANCE} (a tombstone, as Spring Kafka writes
   * it).
   *
   * @throws IllegalArgumentException as {@link KdelayRecord#build}
   */
  public <K, V> Message<?> build(KdelayLevels levels, String delayTopic, K key, V payload) {
    return of(record.build(levels, delayTopic, key, payload));
  }

  /**
   * The message of a record (for instance one {@link KdelayRecord} built):
   * its topic, partition, key and timestamp as {@link KafkaHeaders}, its
   * headers as {@code byte[]} values.
   */
  public static Message<?> of(ProducerRecord<?, ?> rec) {
    Object payload = rec.value() == null ? KafkaNull.INSTANCE : rec.value();
    MessageBuilder<Object> b = MessageBuilder.withPayload(payload).setHeader(KafkaHeaders.TOPIC, rec.topic());
    if (rec.partition() != null) {
      b.setHeader(KafkaHeaders.PARTITION, rec.partition());
    }
    if (rec.key() != null) {
      b.setHeader(KafkaHeaders.KEY, rec.key());
    }
    if (rec.timestamp() != null) {
      b.setHeader(KafkaHeaders.TIMESTAMP, rec.timestamp());
    }
    for (Header h : rec.headers()) {
      b.setHeader(h.key(), h.value() == null ? new byte[0] : h.value());
    }
    return b.build();
  }
}
