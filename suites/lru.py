"""A cache of values by key, bounded in bytes (and, where asked, in count), least recently used
dropped first: the engine's references and oracles (fitness.common.reference, fitness.engine.measuring) and a
TritonBench child's whole draws (suites.tritonbench)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class BytesLRU:
    """Values by key, the least recently used dropped once their bytes pass `max_bytes` or their
    number `max_items` (the newest is always kept). Not locked: its owner holds a lock around it."""

    def __init__(self, max_bytes: int, size: Callable[[Any], int], max_items: int | None = None):
        self.max_bytes, self.size, self.max_items = max_bytes, size, max_items  # size(value) -> bytes
        self._items: OrderedDict = OrderedDict()
        self._bytes = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Any:
        """The value (now the most recently used); KeyError where there is none."""
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        self._items[key] = value
        self._bytes += self.size(value)
        while len(self._items) > 1 and self._over():
            self._bytes -= self.size(self._items.popitem(last=False)[1])

    def _over(self) -> bool:
        return self._bytes > self.max_bytes or (self.max_items is not None and len(self._items) > self.max_items)

    def pop(self, key: Hashable) -> Any:
        """The value, no longer kept; KeyError where there is none."""
        value = self._items.pop(key)
        self._bytes -= self.size(value)
        return value
