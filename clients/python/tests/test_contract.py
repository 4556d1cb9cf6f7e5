"""Every shared vector of testdata/contract, checked against the Python helper."""

from datetime import datetime, timezone

import pytest

import kdelay
from conftest import headers_of, key_of, section

MURMUR = section("murmur2.json", "vectors")
TABLES = section("tables.json", "tables")
PARSE = section("parse.json", "vectors")
STAMP = section("stamp.json", "vectors")
SERIES = section("series.json", "vectors")
FORWARD = section("rewrite.json", "forward")
DEAD = section("rewrite.json", "dead_letter")


@pytest.mark.parametrize("v", MURMUR, ids=[repr(v.get("key", v.get("key_hex")))[:40] for v in MURMUR])
def test_murmur2(v):
    h = kdelay.murmur2(key_of(v))
    assert h == v["murmur2"]
    assert kdelay.to_positive(h) == v["positive"]


@pytest.mark.parametrize("v", TABLES, ids=[f"{v['spec']!r} k={v['per_level']}"[:60] for v in TABLES])
def test_table(v):
    if v.get("error"):
        with pytest.raises(ValueError):
            kdelay.Levels.parse(v["spec"], v["per_level"])
        return
    t = kdelay.Levels.parse(v["spec"], v["per_level"])
    assert list(t.durations_ns) == v["durations_ns"]
    assert t.partitions == v["partitions"]
    for i, (frm, to) in enumerate(v.get("ranges") or []):
        assert t.first_partition(i + 1) == frm
        assert t.first_partition(i + 2) == to
        assert t.level_of(frm) == i + 1 and t.level_of(to - 1) == i + 1
    assert v["level_for"]
    for lf in v["level_for"]:
        assert t.level_for_ns(lf["delay_ns"]) == lf["level"], lf
    assert v["partition_for"]
    for pf in v["partition_for"]:
        key = key_of(pf)
        if pf["partition"] is None:
            for _ in range(50):
                assert pf["from"] <= t.partition_for(pf["level"], key) < pf["to"]
        else:
            assert t.partition_for(pf["level"], key) == pf["partition"], pf


@pytest.mark.parametrize("v", PARSE, ids=[v["name"] for v in PARSE])
def test_parse(v):
    t = kdelay.Levels.parse(v["spec"], v["per_level"])
    hs = headers_of(v["headers"])
    if v.get("error"):
        with pytest.raises(kdelay.ContractError) as e:
            t.parse_headers(hs, v["timestamp_ms"])
        assert (e.value.reason, e.value.header) == (v["error"]["reason"], v["error"]["header"])
        return
    w = v["want"]
    assert t.parse_headers(hs, v["timestamp_ms"]) == kdelay.Schedule(
        w["target"], w["target_partition"], w["due_ms"], w["delay_ms"], w["level"]
    )


@pytest.mark.parametrize("v", STAMP, ids=[v["name"] for v in STAMP])
def test_delayed(v):
    t = kdelay.Levels.parse(v["spec"], v["per_level"])
    kw = dict(
        levels=t,
        key=key_of(v),
        value=b"value",
        headers=headers_of(v["headers"]),
        timestamp=v["timestamp_ms"],
        delay=v.get("delay_ms"),
        at=v.get("at_ms"),
        level=v.get("level"),
        target_partition=v.get("target_partition"),
    )
    if v.get("error"):
        with pytest.raises(ValueError):
            kdelay.delayed(v["topic"], v["target"], **kw)
        return
    got = kdelay.delayed(v["topic"], v["target"], **kw)
    assert got["topic"] == v["topic"]
    assert got["timestamp"] == v["timestamp_ms"]
    assert got["key"] == key_of(v) and got["value"] == b"value"
    assert got["headers"] == headers_of(v["want_headers"])
    if v.get("want_partition") is None:
        assert v["want_from"] <= got["partition"] < v["want_to"]
    else:
        assert got["partition"] == v["want_partition"]
        if v.get("key") is not None:  # a str key hashes as its UTF-8 bytes
            kw["key"] = v["key"]
            assert kdelay.delayed(v["topic"], v["target"], **kw)["partition"] == v["want_partition"]
    # An aware datetime is the same as its epoch ms.
    if v.get("at_ms") is not None:
        kw["at"] = datetime.fromtimestamp(v["at_ms"] / 1000, tz=timezone.utc)
        assert kdelay.delayed(v["topic"], v["target"], **kw)["headers"] == headers_of(v["want_headers"])


@pytest.mark.parametrize("v", FORWARD, ids=[v["name"] for v in FORWARD])
def test_forwarded_headers(v):
    got = kdelay.forwarded_headers(headers_of(v["headers"]), v["due_ms"], v["source"])
    assert got == headers_of(v["want_headers"])


@pytest.mark.parametrize("v", DEAD, ids=[v["name"] for v in DEAD])
def test_dead_letter_headers(v):
    got = kdelay.dead_letter_headers(headers_of(v["headers"]), v["reason"], v["source"])
    assert got == headers_of(v["want_headers"])


@pytest.mark.parametrize("v", SERIES, ids=[v["name"] for v in SERIES])
def test_series(v):
    t = kdelay.Levels.parse(v["spec"], v["per_level"])
    kw = dict(
        levels=t,
        key=key_of(v),
        value=b"value",
        headers=headers_of(v["headers"]),
        timestamp=v["timestamp_ms"],
        delay=v.get("delay_ms"),
        at=v.get("at_ms"),
        id=v.get("id"),
        every=v.get("every_ms"),
        cron=v.get("cron"),
        timezone=v.get("timezone"),
        until=v.get("until_ms"),
        count=v.get("count"),
    )
    if v.get("error"):
        with pytest.raises(ValueError):
            kdelay.delayed(v["topic"], v["target"], **kw)
        return
    got = kdelay.delayed(v["topic"], v["target"], **kw)
    assert got["headers"] == headers_of(v["want_headers"])
    if v.get("want_partition") is None:
        assert v["want_from"] <= got["partition"] < v["want_to"]
    else:
        assert got["partition"] == v["want_partition"]
