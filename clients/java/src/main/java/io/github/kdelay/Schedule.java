package io.github.kdelay;

/**
 * What the headers of a delayed record say, as the relay reads them.
 *
 * @param target the topic to deliver to
 * @param targetPartition the requested target partition, or -1 to let the key decide
 * @param dueMs when the record is due, epoch milliseconds
 * @param delayMs dueMs minus the record timestamp (negative for a due time before it)
 * @param level the level whose partitions the record belongs in: levelFor(delay)
 */
public record Schedule(String target, int targetPartition, long dueMs, long delayMs, int level) {}
