# result: ['return', 'words']
from typing import Dict, Generic, Iterable, List, Optional, Protocol, TypeVar, get_type_hints

T = TypeVar("T")


class Stack(Generic[T]):
    def __init__(self) -> None:
        self._items: List[T] = []

    def push(self, item: T) -> None:
        self._items.append(item)

    def pop(self) -> Optional[T]:
        return self._items.pop() if self._items else None


class HasLen(Protocol):
    def __len__(self) -> int: ...


def total_len(xs: Iterable[HasLen]) -> int:
    return sum(len(x) for x in xs)


def index(words: List[str]) -> Dict[str, int]:
    return {w: i for i, w in enumerate(words)}


s: Stack[int] = Stack()
s.push(1)
s.push(2)
print(s.pop(), total_len(["ab", "cde"]), index(["x", "y"]))
sorted(get_type_hints(index))
