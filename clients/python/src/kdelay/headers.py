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
#: Added to a forwarded record: its due time, epoch ms.
DUE_AT = "kdelay-due-at"
#: Added to forwarded and dead-lettered records: topic/partition/offset.
SOURCE = "kdelay-source"
#: Added to a dead-lettered record: the reason label.
ERROR = "kdelay-error"
