# result: 'red'
from enum import Enum, IntEnum, auto


class Color(Enum):
    RED = auto()
    GREEN = auto()
    BLUE = auto()


class Level(IntEnum):
    LOW = 1
    HIGH = 3


print([c.name for c in Color], Color["GREEN"].value, Color(3))
print(Level.HIGH > Level.LOW, sorted(Level, reverse=True))
Color.RED.name.lower()
