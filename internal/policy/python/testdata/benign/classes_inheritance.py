# result: 6
import math


class Shape:
    count = 0

    def __init__(self, name):
        self.name = name
        Shape.count += 1

    def area(self):
        raise NotImplementedError

    def __repr__(self):
        return f"{self.__class__.__name__}({self.name!r}, area={self.area():.2f})"

    def __eq__(self, other):
        return isinstance(other, Shape) and self.area() == other.area()

    def __lt__(self, other):
        return self.area() < other.area()

    def __hash__(self):
        return hash(round(self.area(), 6))


class Circle(Shape):
    def __init__(self, r):
        super().__init__("circle")
        self.r = r

    def area(self):
        return math.pi * self.r ** 2

    @property
    def diameter(self):
        return 2 * self.r


class Square(Shape):
    def __init__(self, side):
        super().__init__("square")
        self.side = side

    def area(self):
        return self.side ** 2

    @classmethod
    def unit(cls):
        return cls(1)

    @staticmethod
    def describe():
        return "four equal sides"


shapes = sorted([Circle(1), Square(2), Square.unit()])
print(shapes, Circle(2).diameter, Square.describe(), Square(2) == Square(2))
print(isinstance(shapes[0], Shape), issubclass(Circle, Shape), type(shapes[0]).__name__)
Shape.count
