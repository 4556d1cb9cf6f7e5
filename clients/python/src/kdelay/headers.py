"""Header names of kdelay's producer contract."""

PREFIX = "kdelay-"
#: Required: the topic to deliver to.
TARGET = "kdelay-target"
#: Delay after the record timestamp: a Go duration ("90s") or whole milliseconds.
DELAY = "kdelay-delay"
#: Absolute due time: epoch milliseconds or RFC 3339; wins over the others.
DELIVER_AT = "kdelay-deliver-at"
#: RocketMQ-style level number, 1..levels.
LEVEL = "kdelay-level"
#: Optional partition of the target topic.
TARGET_PARTITION = "kdelay-target-partition"
#: Optional schedule id (1-255 bytes) for cancel and reschedule.
ID = "kdelay-id"
#: A recurring series on a fixed grid: a Go duration of at least 1s.
EVERY = "kdelay-every"
#: A recurring series on a cron expression (five fields, or six with seconds first).
CRON = "kdelay-cron"
#: IANA time zone of a cron series (default UTC).
TIMEZONE = "kdelay-timezone"
#: End of a series: epoch ms or RFC 3339.
UNTIL = "kdelay-until"
#: Number of firings of a series.
COUNT = "kdelay-count"
#: Added to a series' forwarded copy: which firing it is, from 1.
OCCURRENCE = "kdelay-occurrence"
#: Added to a forwarded record: its due time, epoch ms.
DUE_AT = "kdelay-due-at"
#: Added to forwarded and dead-lettered records: topic/partition/offset.
SOURCE = "kdelay-source"
#: Added to a dead-lettered record: the reason label.
ERROR = "kdelay-error"
