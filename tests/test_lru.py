"""suites/lru.py: the byte-bounded cache the engine's references and a suite's kept draws use."""
from suites.lru import BytesLRU


def test_the_bounded_cache_drops_the_least_recently_used_and_always_keeps_the_newest():
    lru = BytesLRU(10, len)
    lru.put("a", "xxxx")
    lru.put("b", "xxxx")
    lru.get("a")  # now the most recently used
    lru.put("c", "xxxx")  # 12 bytes: the least recently used ("b") goes
    assert "a" in lru and "c" in lru and "b" not in lru and len(lru) == 2
    lru.put("d", "x" * 20)  # over the bound alone: kept, everything older dropped
    assert len(lru) == 1 and "d" in lru


def test_a_count_bound_drops_the_least_recently_used_too_and_a_popped_value_frees_its_bytes():
    lru = BytesLRU(100, len, max_items=2)
    lru.put("a", "xx"), lru.put("b", "xx")
    lru.get("a")
    lru.put("c", "xx")  # three values: the least recently used ("b") goes
    assert "a" in lru and "c" in lru and "b" not in lru
    assert lru.pop("a") == "xx" and len(lru) == 1
    lru.put("d", "x" * 98)  # fits beside "c" only because "a" gave its bytes back
    assert "c" in lru and "d" in lru
