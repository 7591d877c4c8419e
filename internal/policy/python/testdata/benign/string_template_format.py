# result: 'Hello Big World'
import string

t = string.Template("Hello $name, you owe $$${amount}")
print(t.substitute(name="Ann", amount="5.00"))
print("{:>8}|{:<6}|{:^7}".format("right", "left", "mid"))
print("{name} is {age}".format(**{"name": "Bo", "age": 4}))
print("%s has %d items (%.1f%%)" % ("cart", 3, 12.345))
string.capwords("hello big world")
