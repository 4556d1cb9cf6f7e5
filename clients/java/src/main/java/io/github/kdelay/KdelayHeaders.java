package io.github.kdelay;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * The header names of kdelay's producer contract, and the header rewrites
 * the relay applies (what a consumer of the target or dead-letter topic
 * sees).
 */
public final class KdelayHeaders {
  private KdelayHeaders() {}

  /** Every header kdelay reads or writes starts with this prefix. */
  public static final String PREFIX = "kdelay-";
  /** Required: the topic to deliver to. */
  public static final String TARGET = "kdelay-target";
  /** Delay after the record timestamp: a Go duration ("90s") or whole milliseconds. */
  public static final String DELAY = "kdelay-delay";
  /** Absolute due time: epoch milliseconds or RFC 3339; wins over the others. */
  public static final String DELIVER_AT = "kdelay-deliver-at";
  /** RocketMQ-style level number, 1..levels. */
  public static final String LEVEL = "kdelay-level";
  /** Optional partition of the target topic. */
  public static final String TARGET_PARTITION = "kdelay-target-partition";
  /**
   * Optional schedule id (1-255 bytes) for cancel and reschedule. A relay
   * that does not know it yet delivers the record as usual.
   */
  public static final String ID = "kdelay-id";
  /** The longest {@link #ID}, in bytes. */
  public static final int MAX_ID_LEN = 255;
  /** A recurring series on a fixed grid: a Go duration of at least 1s. */
  public static final String EVERY = "kdelay-every";
  /** A recurring series on a cron expression (five fields, or six with seconds first). */
  public static final String CRON = "kdelay-cron";
  /** IANA time zone of a cron series (default UTC). */
  public static final String TIMEZONE = "kdelay-timezone";
  /** End of a series: epoch ms or RFC 3339. */
  public static final String UNTIL = "kdelay-until";
  /** Number of firings of a series. */
  public static final String COUNT = "kdelay-count";
  /** Added to a series' forwarded copy: which firing it is, from 1. */
  public static final String OCCURRENCE = "kdelay-occurrence";
  /** Added to a forwarded record: its due time, epoch ms. */
  public static final String DUE_AT = "kdelay-due-at";
  /** Added to forwarded and dead-lettered records: topic/partition/offset. */
  public static final String SOURCE = "kdelay-source";
  /** Added to a dead-lettered record: the reason label. */
  public static final String ERROR = "kdelay-error";

  /** Whether a header key is one of kdelay's (starts with {@link #PREFIX}). */
  public static boolean isControl(String key) {
    return key.startsWith(PREFIX);
  }

  /** The value of the last header named key, as UTF-8, or null. */
  public static String lastValue(Headers headers, String key) {
    if (headers == null) {
      return null;
    }
    Header h = headers.lastHeader(key);
    if (h == null) {
      return null;
    }
    return h.value() == null ? "" : new String(h.value(), StandardCharsets.UTF_8);
  }

  /**
   * The headers of the forwarded copy: the producer's own headers in order,
   * without any kdelay- header, then {@link #DUE_AT}, {@link #SOURCE} and,
   * when the record has one, its {@link #ID} (the last one).
   */
  public static Headers forwarded(Iterable<Header> headers, long dueMs, String source) {
    List<Header> out = new ArrayList<>();
    Header id = null;
    for (Header h : headers) {
      if (!isControl(h.key())) {
        out.add(h);
      } else if (h.key().equals(ID)) {
        id = h;
      }
    }
    out.add(new RecordHeader(DUE_AT, Long.toString(dueMs).getBytes(StandardCharsets.UTF_8)));
    out.add(new RecordHeader(SOURCE, source.getBytes(StandardCharsets.UTF_8)));
    if (id != null) {
      out.add(new RecordHeader(ID, id.value()));
    }
    return new RecordHeaders(out);
  }

  /**
   * The headers of the dead-lettered copy: every original header except an
   * earlier {@link #ERROR} or {@link #SOURCE}, then {@link #ERROR} (the
   * reason) and {@link #SOURCE}.
   */
  public static Headers deadLettered(Iterable<Header> headers, String reason, String source) {
    List<Header> out = new ArrayList<>();
    for (Header h : headers) {
      if (!h.key().equals(ERROR) && !h.key().equals(SOURCE)) {
        out.add(h);
      }
    }
    out.add(new RecordHeader(ERROR, reason.getBytes(StandardCharsets.UTF_8)));
    out.add(new RecordHeader(SOURCE, source.getBytes(StandardCharsets.UTF_8)));
    return new RecordHeaders(out);
  }

  /** The kdelay-source value of a delay-topic record. */
  public static String source(String topic, int partition, long offset) {
    return topic + "/" + partition + "/" + offset;
  }
}
