# result: '2 items'
name, value, ratio = "throughput", 1234567.891, 0.4567
print(f"{name:>12}|{value:,.2f}|{ratio:.1%}")
print(f"{value=:.1f}", f"{'centered':^20}", f"{255:#x} {255:08b}")
width = 10
print(f"{'dynamic':<{width}}|")
items = {"a": 1}
f"{items['a'] + 1} items"
