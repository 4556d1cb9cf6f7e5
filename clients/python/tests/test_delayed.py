"""delayed() beyond the shared vectors: kdelay-id, rounding, input forms."""

from datetime import datetime, timedelta, timezone

import pytest

import kdelay
from kdelay import headers as H


def test_id_header_last():
    kw = kdelay.delayed("delay-topic", "orders", delay=1500, key="k", value="v", id="reminder-17",
                        headers={"trace": "abc"}, timestamp=1000)
    assert kw["headers"] == [("trace", b"abc"), (H.TARGET, b"orders"), (H.DELAY, b"1500"), (H.ID, b"reminder-17")]
    assert kw["timestamp"] == 1000 and kw["key"] == "k" and kw["value"] == "v"


@pytest.mark.parametrize("bad", ["", "x" * 256, "é" * 128])
def test_id_length(bad):
    with pytest.raises(ValueError):
        kdelay.delayed("delay-topic", "orders", delay=1, id=bad)


def test_id_255_bytes():
    kdelay.delayed("delay-topic", "orders", delay=1, id="x" * 255)


def test_sub_millisecond_delay_rounds_up():
    kw = kdelay.delayed("delay-topic", "orders", delay=timedelta(microseconds=4_999_001), timestamp=0)
    assert (H.DELAY, b"5000") in kw["headers"]
    assert kw["partition"] == 1  # 5 s: level 2


def test_naive_datetime_refused():
    with pytest.raises(ValueError):
        kdelay.delayed("delay-topic", "orders", at=datetime(2030, 1, 1))


def test_aware_datetime_any_zone():
    at = datetime(2030, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1)))
    kw = kdelay.delayed("delay-topic", "orders", at=at, timestamp=0)
    assert (H.DELIVER_AT, str(1893456000000).encode()) in kw["headers"]


def test_default_now_timestamp():
    import time

    before = time.time_ns() // 1_000_000
    kw = kdelay.delayed("delay-topic", "orders", delay=timedelta(seconds=90), key=b"order-17")
    assert before <= kw["timestamp"] <= time.time_ns() // 1_000_000
    assert kw["partition"] == 4  # 90 s -> level 5 (1m) -> partition 4


def test_null_key_random_within_level():
    lv = kdelay.Levels.parse("1s 2s", 8)
    seen = {kdelay.delayed("t", "orders", delay=2000, levels=lv)["partition"] for _ in range(200)}
    assert seen <= set(range(8, 16)) and len(seen) > 1
