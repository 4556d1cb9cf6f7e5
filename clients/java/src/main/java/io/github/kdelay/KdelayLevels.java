package io.github.kdelay;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.utils.Utils;

/**
 * kdelay's level table: the delay levels (RocketMQ's messageDelayLevel, as
 * the relay's {@code KDELAY_LEVELS}), how they map to partitions of the delay
 * topic, and how the relay reads a record's kdelay headers.
 *
 * <p>Level i (1-based) owns partitions {@code [(i-1)*k, i*k)}, k = partitions
 * per level ({@code KDELAY_PARTITIONS_PER_LEVEL}, default 1). A record
 * belongs in the largest level whose duration is not above its delay (level
 * 1 for shorter delays) and, inside the level, in partition {@code
 * toPositive(murmur2(key)) % k}, the Java client's own hash. Immutable and
 * thread-safe.
 */
public final class KdelayLevels {
  /** RocketMQ 4.x's default messageDelayLevel: 18 levels; the relay's default. */
  public static final String DEFAULT_SPEC = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

  /** Bound on levels x partitions per level, as the relay's levels.MaxPartitions. */
  public static final int MAX_PARTITIONS = 100_000;

  private static final long MAX_DELAY_NS = 100L * 365 * 24 * 3600 * 1_000_000_000L;
  /** 9999-12-31T00:00:00Z in epoch ms: the latest due time the relay accepts. */
  private static final long MAX_DELIVER_AT_MS = 253402214400000L;

  private static final KdelayLevels DEFAULT = parse(DEFAULT_SPEC, 1);

  private final long[] durationsNs;
  private final int perLevel;

  private KdelayLevels(long[] durationsNs, int perLevel) {
    this.durationsNs = durationsNs;
    this.perLevel = perLevel;
  }

  /** The 18 default levels with one partition each. */
  public static KdelayLevels defaults() {
    return DEFAULT;
  }

  /**
   * Parses a level list as {@code KDELAY_LEVELS}: durations separated by
   * spaces or commas, each a Go duration ("90s", "1h30m") or whole days
   * ("1d"), strictly increasing and positive; with perLevel partitions per
   * level ({@code KDELAY_PARTITIONS_PER_LEVEL}).
   *
   * @throws IllegalArgumentException naming the bad entry
   */
  public static KdelayLevels parse(String spec, int perLevel) {
    List<String> tokens = new ArrayList<>();
    StringBuilder cur = new StringBuilder();
    for (int i = 0; i <= spec.length(); i++) {
      char c = i < spec.length() ? spec.charAt(i) : ' ';
      if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '\r') {
        if (cur.length() > 0) {
          tokens.add(cur.toString());
          cur.setLength(0);
        }
      } else {
        cur.append(c);
      }
    }
    if (tokens.isEmpty()) {
      throw new IllegalArgumentException("kdelay: invalid level list: empty");
    }
    long[] durs = new long[tokens.size()];
    for (int i = 0; i < durs.length; i++) {
      String tok = tokens.get(i);
      long d;
      try {
        d = parseLevelToken(tok);
      } catch (GoSyntax.SyntaxException e) {
        throw new IllegalArgumentException("kdelay: invalid level list: entry " + (i + 1) + " \"" + tok + "\": " + e.getMessage());
      }
      if (d <= 0) {
        throw new IllegalArgumentException("kdelay: invalid level list: entry " + (i + 1) + " \"" + tok + "\": must be positive");
      }
      if (i > 0 && d <= durs[i - 1]) {
        throw new IllegalArgumentException("kdelay: invalid level list: entry " + (i + 1) + " \"" + tok + "\": not greater than the previous entry");
      }
      durs[i] = d;
    }
    if (perLevel < 1) {
      throw new IllegalArgumentException("kdelay: partitions per level " + perLevel + ": must be at least 1");
    }
    if ((long) durs.length * perLevel > MAX_PARTITIONS) {
      throw new IllegalArgumentException("kdelay: " + durs.length + " levels x " + perLevel + " partitions per level exceeds " + MAX_PARTITIONS + " partitions");
    }
    return new KdelayLevels(durs, perLevel);
  }

  private static long parseLevelToken(String tok) throws GoSyntax.SyntaxException {
    if (tok.endsWith("d")) {
      long n;
      try {
        n = GoSyntax.parseInt64(tok.substring(0, tok.length() - 1));
      } catch (GoSyntax.SyntaxException e) {
        throw new GoSyntax.SyntaxException("not a duration");
      }
      long day = 24L * 3600 * 1_000_000_000L;
      if (n > Long.MAX_VALUE / day || n < -Long.MAX_VALUE / day) {
        throw new GoSyntax.SyntaxException("out of range");
      }
      return n * day;
    }
    try {
      return GoSyntax.parseDuration(tok);
    } catch (GoSyntax.SyntaxException e) {
      throw new GoSyntax.SyntaxException("not a duration");
    }
  }

  /** The number of levels. */
  public int levels() {
    return durationsNs.length;
  }

  /** Partitions per level (k). */
  public int perLevel() {
    return perLevel;
  }

  /** The partition count the delay topic must have: levels x k. */
  public int partitions() {
    return durationsNs.length * perLevel;
  }

  /** The level durations, level 1 first. */
  public List<Duration> durations() {
    List<Duration> out = new ArrayList<>(durationsNs.length);
    for (long d : durationsNs) {
      out.add(Duration.ofNanos(d));
    }
    return Collections.unmodifiableList(out);
  }

  /** The duration of level (1-based), or {@link Duration#ZERO} if out of range. */
  public Duration duration(int level) {
    return level < 1 || level > durationsNs.length ? Duration.ZERO : Duration.ofNanos(durationsNs[level - 1]);
  }

  /** The first partition of level (1-based). */
  public int firstPartition(int level) {
    return (level - 1) * perLevel;
  }

  /** The level (1-based) owning partition p, or 0 outside the delay topic. */
  public int levelOf(int p) {
    return p < 0 || p >= partitions() ? 0 : p / perLevel + 1;
  }

  /** The level for a delay: the largest level not above it, or 1. */
  public int levelFor(Duration delay) {
    return levelForNanos(saturatedNanos(delay));
  }

  /** {@link #levelFor(Duration)} for a delay in milliseconds. */
  public int levelForMillis(long delayMs) {
    return levelFor(Duration.ofMillis(delayMs));
  }

  int levelForNanos(long delayNs) {
    int level = 1;
    for (int i = 0; i < durationsNs.length; i++) {
      if (durationsNs[i] > delayNs) {
        break;
      }
      level = i + 1;
    }
    return level;
  }

  private static long saturatedNanos(Duration d) {
    try {
      return d.toNanos();
    } catch (ArithmeticException e) {
      return d.isNegative() ? Long.MIN_VALUE : Long.MAX_VALUE;
    }
  }

  /**
   * The delay-topic partition for a record of level and key: the level's
   * first partition plus {@code Utils.toPositive(Utils.murmur2(key)) % k},
   * as the Java client's default partitioner hashes keys. A null key picks
   * a random partition of the level. The level is clamped to the table.
   */
  public int partitionFor(int level, byte[] key) {
    level = Math.min(Math.max(level, 1), durationsNs.length);
    int from = firstPartition(level);
    if (perLevel == 1) {
      return from;
    }
    if (key == null) {
      return from + ThreadLocalRandom.current().nextInt(perLevel);
    }
    return from + Utils.toPositive(Utils.murmur2(key)) % perLevel;
  }

  /**
   * Reads the schedule of a delay-topic record from its headers and
   * timestamp, as the relay does. When a header repeats, the last one
   * counts.
   *
   * @throws ContractException when the relay would dead-letter the record
   */
  public Schedule parseHeaders(Headers headers, long timestampMs) throws ContractException {
    String target = KdelayHeaders.lastValue(headers, KdelayHeaders.TARGET);
    if (target == null || target.isEmpty()) {
      throw new ContractException(ContractException.MISSING_TARGET, KdelayHeaders.TARGET, target);
    }
    if (!validTopicName(target)) {
      throw new ContractException(ContractException.BAD_TARGET, KdelayHeaders.TARGET, target);
    }
    Header idh = headers == null ? null : headers.lastHeader(KdelayHeaders.ID);
    if (idh != null) {
      int n = idh.value() == null ? 0 : idh.value().length;
      if (n < 1 || n > KdelayHeaders.MAX_ID_LEN) {
        throw new ContractException(ContractException.BAD_ID, KdelayHeaders.ID, KdelayHeaders.lastValue(headers, KdelayHeaders.ID));
      }
    }
    int targetPartition = -1;
    String v = KdelayHeaders.lastValue(headers, KdelayHeaders.TARGET_PARTITION);
    if (v != null) {
      long p;
      try {
        p = GoSyntax.parseInt64(GoSyntax.trimSpace(v));
      } catch (GoSyntax.SyntaxException e) {
        p = -1;
      }
      if (p < 0 || p > Integer.MAX_VALUE) {
        throw new ContractException(ContractException.BAD_TARGET_PARTITION, KdelayHeaders.TARGET_PARTITION, v);
      }
      targetPartition = (int) p;
    }

    v = KdelayHeaders.lastValue(headers, KdelayHeaders.DELIVER_AT);
    if (v != null) {
      long due = parseDeliverAtMs(v);
      if (due == INVALID) {
        throw new ContractException(ContractException.BAD_DELIVER_AT, KdelayHeaders.DELIVER_AT, v);
      }
      return schedule(target, targetPartition, due, timestampMs);
    }
    long delayNs;
    if ((v = KdelayHeaders.lastValue(headers, KdelayHeaders.DELAY)) != null) {
      delayNs = parseDelayNs(v);
    } else if ((v = KdelayHeaders.lastValue(headers, KdelayHeaders.LEVEL)) != null) {
      long n;
      try {
        n = GoSyntax.parseInt64(GoSyntax.trimSpace(v));
      } catch (GoSyntax.SyntaxException e) {
        n = 0;
      }
      if (n < 1 || n > levels()) {
        throw new ContractException(ContractException.LEVEL_OUT_OF_RANGE, KdelayHeaders.LEVEL, v);
      }
      delayNs = durationsNs[(int) n - 1];
    } else {
      throw new ContractException(ContractException.NO_SCHEDULE, "", "");
    }
    // due = ceil to the ms of (timestamp + delay); both are bounded, no overflow.
    long due = Math.addExact(timestampMs, delayNs / 1_000_000L + (delayNs % 1_000_000L > 0 ? 1 : 0));
    if (due < 0) {
      due = 0; // a timestamp before 1970 (Kafka's -1 is "none"): already due
    } else if (due > MAX_DELIVER_AT_MS) {
      throw new ContractException(ContractException.BAD_DELAY, KdelayHeaders.DELAY, Long.toString(delayNs / 1_000_000L));
    }
    return schedule(target, targetPartition, due, timestampMs);
  }

  private Schedule schedule(String target, int targetPartition, long dueMs, long timestampMs) {
    long delayMs = dueMs - timestampMs;
    return new Schedule(target, targetPartition, dueMs, delayMs, levelFor(Duration.ofMillis(delayMs)));
  }

  private static long parseDelayNs(String raw) throws ContractException {
    String v = GoSyntax.trimSpace(raw);
    long d;
    try {
      long ms = GoSyntax.parseInt64(v);
      if (ms > MAX_DELAY_NS / 1_000_000L || ms < -MAX_DELAY_NS / 1_000_000L) {
        throw new ContractException(ContractException.BAD_DELAY, KdelayHeaders.DELAY, raw);
      }
      d = ms * 1_000_000L;
    } catch (GoSyntax.SyntaxException notMs) {
      try {
        d = GoSyntax.parseDuration(v);
      } catch (GoSyntax.SyntaxException e) {
        throw new ContractException(ContractException.BAD_DELAY, KdelayHeaders.DELAY, raw);
      }
      if (d > MAX_DELAY_NS || d < -MAX_DELAY_NS) {
        throw new ContractException(ContractException.BAD_DELAY, KdelayHeaders.DELAY, raw);
      }
    }
    if (d < 0) {
      throw new ContractException(ContractException.NEGATIVE_DELAY, KdelayHeaders.DELAY, raw);
    }
    return d;
  }

  /** Marks an invalid kdelay-deliver-at in {@link #parseDeliverAtMs}. */
  static final long INVALID = Long.MIN_VALUE;

  /**
   * Epoch ms of a kdelay-deliver-at value, rounded up to the ms, or {@link
   * #INVALID}. As in Go, an RFC 3339 time is checked for year >= 1970 in its
   * own zone offset, so "1970-01-01T00:30:00+01:00" is accepted (and due at
   * once).
   */
  static long parseDeliverAtMs(String raw) {
    String v = GoSyntax.trimSpace(raw);
    try {
      long ms = GoSyntax.parseInt64(v);
      return ms < 0 || ms > MAX_DELIVER_AT_MS ? INVALID : ms;
    } catch (GoSyntax.SyntaxException notMs) {
      // RFC 3339 below.
    }
    try {
      long[] t = GoSyntax.parseRfc3339(v);
      long secs = t[0];
      long nanos = t[1];
      if (t[2] < 1970) {
        return INVALID;
      }
      long ms = secs * 1000 + nanos / 1_000_000L; // nanos in [0, 1e9): floor
      if (ms > MAX_DELIVER_AT_MS) {
        return INVALID;
      }
      return ms + (nanos % 1_000_000L > 0 ? 1 : 0);
    } catch (GoSyntax.SyntaxException e) {
      return INVALID;
    }
  }

  /**
   * A record for delayTopic delivered to target after delay (rounded up to
   * the ms), in the partition of its level; see {@link KdelayRecord} for the
   * kdelay-id, a target partition and your own headers.
   */
  public <K, V> ProducerRecord<K, V> delayed(String delayTopic, String target, Duration delay, K key, V value) {
    return KdelayRecord.to(target).delay(delay).build(this, delayTopic, key, value);
  }

  /** A record for delayTopic delivered to target at an absolute time. */
  public <K, V> ProducerRecord<K, V> delayed(String delayTopic, String target, Instant at, K key, V value) {
    return KdelayRecord.to(target).at(at).build(this, delayTopic, key, value);
  }

  /** A record for delayTopic delivered to target after the duration of level (1..levels). */
  public <K, V> ProducerRecord<K, V> delayed(String delayTopic, String target, int level, K key, V value) {
    return KdelayRecord.to(target).level(level).build(this, delayTopic, key, value);
  }

  /** Kafka's topic name rules: 1..249 characters of [a-zA-Z0-9._-], not "." or "..". */
  public static boolean validTopicName(String name) {
    if (name == null || name.isEmpty() || name.length() > 249 || name.equals(".") || name.equals("..")) {
      return false;
    }
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      if (!(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')) {
        return false;
      }
    }
    return true;
  }

  /** The table in messageDelayLevel form with its k, e.g. "1s 5s ... 2h (k=1)". */
  @Override
  public String toString() {
    StringBuilder b = new StringBuilder();
    for (Duration d : durations()) {
      if (b.length() > 0) {
        b.append(' ');
      }
      b.append(d.toString().substring(2).toLowerCase());
    }
    return b.append(" (k=").append(perLevel).append(')').toString();
  }
}
