# result: 'Lima'
import csv

rows = [{"city": "Lima", "pop": 10.7}, {"city": "Quito", "pop": 2.8}, {"city": "Bogota", "pop": 7.9}]
with open("cities.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["city", "pop"])
    w.writeheader()
    w.writerows(rows)
with open("cities.csv", newline="") as f:
    back = list(csv.DictReader(f))
print(back)
max(back, key=lambda r: float(r["pop"]))["city"]
