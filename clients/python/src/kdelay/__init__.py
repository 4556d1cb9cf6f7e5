"""Producer helper for kdelay, delayed delivery for Apache Kafka.

Standard library only. See :func:`delayed` and :class:`Levels`::

    from confluent_kafka import Producer
    import kdelay

    p = Producer({"bootstrap.servers": "localhost:9092"})
    p.produce(**kdelay.delayed("delay-topic", "orders", delay=timedelta(seconds=90),
                               key="order-17", value=b'{"id":17}'))
"""

from .levels import (
    DEFAULT_SPEC,
    ContractError,
    Levels,
    Schedule,
    dead_letter_headers,
    delayed,
    forwarded_headers,
    murmur2,
    to_positive,
    valid_topic_name,
)
from . import headers

__all__ = [
    "DEFAULT_SPEC",
    "ContractError",
    "Levels",
    "Schedule",
    "dead_letter_headers",
    "delayed",
    "forwarded_headers",
    "headers",
    "murmur2",
    "to_positive",
    "valid_topic_name",
]
