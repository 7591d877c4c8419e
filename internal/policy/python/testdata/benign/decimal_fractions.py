# result: '0.1428571429'
from decimal import ROUND_HALF_UP, Decimal, getcontext
from fractions import Fraction

getcontext().prec = 10
price = Decimal("19.99") * 3
print(price, price.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
print(Fraction(1, 3) + Fraction(1, 6), Fraction("0.75"))
str(Decimal(1) / Decimal(7))
