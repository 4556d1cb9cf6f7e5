package io.github.kdelay;

/**
 * A record whose kdelay headers break the producer contract; the relay
 * dead-letters it with {@link #reason()} in kdelay-error.
 */
public final class ContractException extends Exception {
  private static final long serialVersionUID = 1L;

  /** Reason labels, as the relay's levels.Reason. */
  public static final String MISSING_TARGET = "missing_target";
  public static final String BAD_TARGET = "bad_target";
  public static final String BAD_TARGET_PARTITION = "bad_target_partition";
  public static final String BAD_DELAY = "bad_delay";
  public static final String NEGATIVE_DELAY = "negative_delay";
  public static final String LEVEL_OUT_OF_RANGE = "level_out_of_range";
  public static final String BAD_DELIVER_AT = "bad_deliver_at";
  public static final String NO_SCHEDULE = "no_schedule";
  public static final String BAD_ID = "bad_id";

  private final String reason;
  private final String header;
  private final String value;

  ContractException(String reason, String header, String value) {
    super(header.isEmpty() ? "kdelay: " + reason : "kdelay: " + reason + ": header " + header + "=\"" + cut(value) + "\"");
    this.reason = reason;
    this.header = header;
    this.value = value;
  }

  private static String cut(String v) {
    return v == null ? "" : v.length() > 64 ? v.substring(0, 64) : v;
  }

  /** The stable reason label: "missing_target", "bad_delay", ... */
  public String reason() {
    return reason;
  }

  /** The offending header, "" when none of the schedule headers is given. */
  public String header() {
    return header;
  }

  /** The offending header's value, "" when there is none. */
  public String value() {
    return value == null ? "" : value;
  }
}
