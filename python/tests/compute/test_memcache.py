"""The bytes-bounded cache a worker keeps between tasks."""

from __future__ import annotations

from tomus.compute.memcache import MemoryCache


def test_least_recently_used_entries_leave_beyond_the_budget() -> None:
    c: MemoryCache[str] = MemoryCache(budget=10)
    c.put("a", "A", 4)
    c.put("b", "B", 4)
    assert c.get("a") == "A"  # a is now the most recently used
    c.put("c", "C", 4)  # 12 bytes: b leaves
    assert (c.get("a"), c.get("b"), c.get("c")) == ("A", None, "C")


def test_the_newest_entry_stays_whatever_its_size() -> None:
    c: MemoryCache[str] = MemoryCache(budget=10)
    c.put("a", "A", 4)
    c.put("big", "BIG", 50)
    assert (c.get("a"), c.get("big")) == (None, "BIG")


def test_the_first_value_put_under_a_key_is_kept_and_take_forgets_it() -> None:
    c: MemoryCache[str] = MemoryCache(budget=10)
    assert c.put("k", "first", 4) == "first"
    assert c.put("k", "second", 4) == "first"
    assert c.get("k", take=True) == "first"
    assert c.get("k") is None
    c.put("x", "X", 6)
    c.put("y", "Y", 4)  # 10 bytes, within the budget: the taken entry's bytes were returned
    assert (c.get("x"), c.get("y")) == ("X", "Y")
    assert c.clear() == 2 and c.get("x") is None
