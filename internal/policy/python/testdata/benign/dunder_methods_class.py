# result: Vector(9, 12)
class Vector:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __add__(self, o):
        return Vector(self.x + o.x, self.y + o.y)

    def __mul__(self, k):
        return Vector(self.x * k, self.y * k)

    __rmul__ = __mul__

    def __abs__(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5

    def __bool__(self):
        return bool(self.x or self.y)

    def __iter__(self):
        yield self.x
        yield self.y

    def __repr__(self):
        return f"Vector({self.x}, {self.y})"

    def __eq__(self, o):
        return tuple(self) == tuple(o)

    def __hash__(self):
        return hash(tuple(self))

    def __format__(self, spec):
        return f"<{format(self.x, spec)}, {format(self.y, spec)}>"


v = Vector(3, 4)
print(abs(v), 2 * v, v + v, bool(Vector(0, 0)), f"{v:.1f}", {v: 1}[Vector(3, 4)])
print(Vector.__name__, v.__class__.__name__, Vector.__doc__, Vector.__module__)
v * 3
