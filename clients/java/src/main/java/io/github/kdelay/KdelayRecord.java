package io.github.kdelay;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * Builds a delayed record for the delay topic: the kdelay headers and the
 * partition of the record's level, chosen by key hash as the relay expects.
 * The Java counterpart of the Go helper {@code levels.Table.Stamp}.
 *
 * <pre>{@code
 * KdelayLevels levels = KdelayLevels.defaults(); // or parse(KDELAY_LEVELS, k)
 * ProducerRecord<String, String> rec = KdelayRecord.to("orders")
 *     .delay(Duration.ofSeconds(90))   // or .at(Instant) or .level(5)
 *     .id("reminder-17")               // optional kdelay-id
 *     .header("trace", traceId)        // your own headers travel along
 *     .build(levels, "delay-topic", "order-17", payload);
 * producer.send(rec);
 * }</pre>
 *
 * <p>At most one of delay, at and level; none means a zero delay. Not
 * thread-safe; one builder per record.
 */
public final class KdelayRecord {
  private final String target;
  private Duration delay;
  private Instant at;
  private int level;
  private Integer targetPartition;
  private byte[] id;
  private Long timestampMs;
  private byte[] keyBytes;
  private final List<Header> headers = new ArrayList<>();

  private KdelayRecord(String target) {
    this.target = target;
  }

  /** A record to be delivered to target. */
  public static KdelayRecord to(String target) {
    return new KdelayRecord(target);
  }

  /** Deliver after delay (counted from the record timestamp; rounded up to the ms). */
  public KdelayRecord delay(Duration delay) {
    this.delay = delay;
    return this;
  }

  /** Deliver at an absolute time (rounded up to the ms). */
  public KdelayRecord at(Instant at) {
    this.at = at;
    return this;
  }

  /** Deliver after the duration of a level (1..levels), RocketMQ style. */
  public KdelayRecord level(int level) {
    this.level = level;
    return this;
  }

  /** The partition of the target topic; by default the key decides. */
  public KdelayRecord targetPartition(int partition) {
    this.targetPartition = partition;
    return this;
  }

  /**
   * The schedule id, {@code kdelay-id} (1-255 bytes of UTF-8), for cancel and
   * reschedule; it stays on the delivered record.
   */
  public KdelayRecord id(String id) {
    this.id = id.getBytes(StandardCharsets.UTF_8);
    return this;
  }

  /** The record timestamp, epoch ms (default: now, when built). */
  public KdelayRecord timestamp(long epochMs) {
    this.timestampMs = epochMs;
    return this;
  }

  /**
   * The serialized key, for the level partition when the level has several
   * partitions (k > 1) and the key is neither byte[] nor String (String keys
   * are hashed as UTF-8, as StringSerializer writes them).
   */
  public KdelayRecord keyBytes(byte[] keyBytes) {
    this.keyBytes = keyBytes;
    return this;
  }

  /** One of your own headers; they are delivered unchanged, in order. */
  public KdelayRecord header(String key, byte[] value) {
    headers.add(new RecordHeader(key, value));
    return this;
  }

  /** One of your own headers, as UTF-8. */
  public KdelayRecord header(String key, String value) {
    return header(key, value == null ? null : value.getBytes(StandardCharsets.UTF_8));
  }

  /**
   * The record for delayTopic, partitioned by levels.
   *
   * @throws IllegalArgumentException when the record cannot be stamped: a bad
   *     target or id, a negative delay or target partition, a level out of
   *     range, more than one of delay/at/level, or a key of another type than
   *     byte[] or String without {@link #keyBytes} on a level with k > 1
   */
  public <K, V> ProducerRecord<K, V> build(KdelayLevels levels, String delayTopic, K key, V value) {
    if (!KdelayLevels.validTopicName(target)) {
      throw new IllegalArgumentException("kdelay: invalid target topic \"" + target + "\"");
    }
    int set = (delay != null && !delay.isZero() ? 1 : 0) + (at != null ? 1 : 0) + (level != 0 ? 1 : 0);
    if (set > 1) {
      throw new IllegalArgumentException("kdelay: set at most one of delay, at and level");
    }
    long ts = timestampMs != null ? timestampMs : System.currentTimeMillis();
    List<Header> hs = new ArrayList<>(headers);
    hs.add(utf8(KdelayHeaders.TARGET, target));
    int lvl;
    if (at != null) {
      long atMs = ceilMillis(at);
      hs.add(utf8(KdelayHeaders.DELIVER_AT, Long.toString(atMs)));
      lvl = levels.levelForMillis(atMs - ts);
    } else if (level != 0) {
      if (level < 1 || level > levels.levels()) {
        throw new IllegalArgumentException("kdelay: level " + level + " out of range 1.." + levels.levels());
      }
      hs.add(utf8(KdelayHeaders.LEVEL, Integer.toString(level)));
      lvl = level;
    } else {
      Duration d = delay == null ? Duration.ZERO : delay;
      if (d.isNegative()) {
        throw new IllegalArgumentException("kdelay: negative delay " + d);
      }
      long ms = ceilMillis(d);
      hs.add(utf8(KdelayHeaders.DELAY, Long.toString(ms)));
      lvl = levels.levelForMillis(ms);
    }
    if (targetPartition != null) {
      if (targetPartition < 0) {
        throw new IllegalArgumentException("kdelay: negative target partition " + targetPartition);
      }
      hs.add(utf8(KdelayHeaders.TARGET_PARTITION, Integer.toString(targetPartition)));
    }
    if (id != null) {
      if (id.length < 1 || id.length > 255) {
        throw new IllegalArgumentException("kdelay: id of " + id.length + " bytes: must be 1-255 bytes");
      }
      hs.add(new RecordHeader(KdelayHeaders.ID, id));
    }
    int partition = levels.partitionFor(lvl, hashKey(levels, key));
    return new ProducerRecord<>(delayTopic, partition, ts, key, value, hs);
  }

  private byte[] hashKey(KdelayLevels levels, Object key) {
    if (keyBytes != null) {
      return keyBytes;
    }
    if (key == null || levels.perLevel() == 1) {
      return null; // k = 1: the key does not matter
    }
    if (key instanceof byte[] b) {
      return b;
    }
    if (key instanceof String s) {
      return s.getBytes(StandardCharsets.UTF_8);
    }
    throw new IllegalArgumentException("kdelay: key of type " + key.getClass().getName()
        + " on a level with " + levels.perLevel() + " partitions: give keyBytes(serialized key)");
  }

  private static Header utf8(String key, String value) {
    return new RecordHeader(key, value.getBytes(StandardCharsets.UTF_8));
  }

  static long ceilMillis(Duration d) {
    long ms = d.toMillis(); // floor for d >= 0
    return d.minusMillis(ms).isZero() ? ms : ms + 1;
  }

  static long ceilMillis(Instant t) {
    long ms = t.toEpochMilli(); // floor
    return Instant.ofEpochMilli(ms).equals(t) ? ms : ms + 1;
  }
}
