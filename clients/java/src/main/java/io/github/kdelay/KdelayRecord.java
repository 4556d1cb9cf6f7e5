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
 *
 * <p>A recurring series: {@code .every(Duration.ofHours(1))} or
 * {@code .cron("0 30 9 * * MON-FRI").timezone("Europe/Berlin")}, with an
 * {@code id}; {@code until} and {@code count} end it. Without delay, at or
 * level an every series starts one interval after the timestamp; a cron
 * series then needs delay or at (the relay checks the expression).
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
  private Duration every;
  private String cron;
  private String timezone;
  private Instant until;
  private Integer count;
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

  /** A recurring series every interval (kdelay-every, at least 1 s); needs an id. */
  public KdelayRecord every(Duration interval) {
    this.every = interval;
    return this;
  }

  /** A recurring series on a cron expression (kdelay-cron); needs an id. */
  public KdelayRecord cron(String expression) {
    this.cron = expression;
    return this;
  }

  /** The IANA time zone of the cron expression (kdelay-timezone; default UTC). */
  public KdelayRecord timezone(String zone) {
    this.timezone = zone;
    return this;
  }

  /** No occurrence of the series after this time (kdelay-until). */
  public KdelayRecord until(Instant until) {
    this.until = until;
    return this;
  }

  /** The series fires this many times (kdelay-count, at least 1). */
  public KdelayRecord count(int firings) {
    this.count = firings;
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
    boolean series = every != null || cron != null;
    int lvl;
    long first;
    if (series && set == 0) {
      if (cron != null) {
        throw new IllegalArgumentException("kdelay: a cron series needs delay or at for its first occurrence");
      }
      long everyMs = ceilMillis(every);
      lvl = levels.levelForMillis(everyMs);
      first = ts + everyMs;
    } else if (at != null) {
      long atMs = ceilMillis(at);
      hs.add(utf8(KdelayHeaders.DELIVER_AT, Long.toString(atMs)));
      lvl = levels.levelForMillis(atMs - ts);
      first = atMs;
    } else if (level != 0) {
      if (level < 1 || level > levels.levels()) {
        throw new IllegalArgumentException("kdelay: level " + level + " out of range 1.." + levels.levels());
      }
      hs.add(utf8(KdelayHeaders.LEVEL, Integer.toString(level)));
      lvl = level;
      first = ts + levels.duration(level).toMillis();
    } else {
      Duration d = delay == null ? Duration.ZERO : delay;
      if (d.isNegative()) {
        throw new IllegalArgumentException("kdelay: negative delay " + d);
      }
      long ms = ceilMillis(d);
      hs.add(utf8(KdelayHeaders.DELAY, Long.toString(ms)));
      lvl = levels.levelForMillis(ms);
      first = ts + ms;
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
    if (series) {
      addSeries(hs, first);
    } else if (timezone != null || until != null || count != null) {
      throw new IllegalArgumentException("kdelay: timezone, until and count need every or cron");
    }
    int partition = levels.partitionFor(lvl, hashKey(levels, key));
    return new ProducerRecord<>(delayTopic, partition, ts, key, value, hs);
  }

  private void addSeries(List<Header> hs, long firstMs) {
    if (id == null) {
      throw new IllegalArgumentException("kdelay: a recurring series needs an id");
    }
    if (every != null && cron != null) {
      throw new IllegalArgumentException("kdelay: set every or cron, not both");
    }
    if (every != null) {
      long ms = ceilMillis(every);
      if (every.isNegative() || ms < 1000) {
        throw new IllegalArgumentException("kdelay: every " + every + ": at least 1 s");
      }
      hs.add(utf8(KdelayHeaders.EVERY, ms % 1000 == 0 ? (ms / 1000) + "s" : ms + "ms"));
    }
    if (cron != null) {
      hs.add(utf8(KdelayHeaders.CRON, cron));
    }
    if (timezone != null) {
      hs.add(utf8(KdelayHeaders.TIMEZONE, timezone));
    }
    if (until != null) {
      long untilMs = until.toEpochMilli();
      if (untilMs < firstMs) {
        throw new IllegalArgumentException("kdelay: until lies before the first occurrence");
      }
      hs.add(utf8(KdelayHeaders.UNTIL, Long.toString(untilMs)));
    }
    if (count != null) {
      if (count < 1) {
        throw new IllegalArgumentException("kdelay: count " + count + ": at least 1");
      }
      hs.add(utf8(KdelayHeaders.COUNT, Integer.toString(count)));
    }
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
