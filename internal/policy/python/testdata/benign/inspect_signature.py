# result: 'def area(width: float, height: float = 1.0, *, unit: str = "m") -> str:'
import inspect


def area(width: float, height: float = 1.0, *, unit: str = "m") -> str:
    """Area of a rectangle."""
    return f"{width * height}{unit}2"


sig = inspect.signature(area)
print(sig, list(sig.parameters))
print(inspect.getdoc(area), inspect.isfunction(area))
print(sig.bind(2, unit="cm").arguments)
inspect.getsource(area).splitlines()[0]
