"""Order analysis: the kind of self-contained script an agent writes and runs.

Generates a deterministic order log, parses it, cleans it, aggregates it by region,
product and week, flags anomalies and prints a report. Standard library only.
"""

import csv
import io
import json
import math
import random
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import Enum
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Tuple

SEED = 20240501
REGIONS = ["north", "south", "east", "west", "central"]
PRODUCTS = {
    "widget": 19.99,
    "gadget": 34.50,
    "doohickey": 7.25,
    "gizmo": 52.00,
    "thingamajig": 12.75,
}
CUSTOMER_RE = re.compile(r"^C(?P<num>\d{4})-(?P<tier>[ABC])$")


class Channel(Enum):
    WEB = "web"
    STORE = "store"
    PHONE = "phone"


@dataclass(order=True)
class Order:
    day: date
    order_id: int
    region: str = field(compare=False)
    product: str = field(compare=False)
    quantity: int = field(compare=False)
    unit_price: float = field(compare=False)
    customer: str = field(compare=False)
    channel: Channel = field(compare=False)
    discount: float = field(default=0.0, compare=False)

    @property
    def total(self) -> float:
        return round(self.quantity * self.unit_price * (1 - self.discount), 2)

    @property
    def tier(self) -> str:
        m = CUSTOMER_RE.match(self.customer)
        return m.group("tier") if m else "?"

    def week(self) -> int:
        return self.day.isocalendar()[1]


@dataclass
class Summary:
    count: int = 0
    revenue: float = 0.0
    quantities: List[int] = field(default_factory=list)

    def add(self, order: Order) -> None:
        self.count += 1
        self.revenue += order.total
        self.quantities.append(order.quantity)

    @property
    def mean_quantity(self) -> float:
        return statistics.fmean(self.quantities) if self.quantities else 0.0

    def as_dict(self) -> Dict[str, float]:
        return {
            "count": self.count,
            "revenue": round(self.revenue, 2),
            "mean_quantity": round(self.mean_quantity, 3),
        }


def generate_log(n: int, rng: random.Random) -> str:
    """Returns a CSV log of n orders, with a few malformed rows as real logs have."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["date", "id", "region", "product", "qty", "price", "customer", "channel", "discount"])
    start = date(2024, 1, 1)
    for i in range(n):
        day = start + timedelta(days=rng.randrange(0, 120))
        product = rng.choice(list(PRODUCTS))
        qty = max(1, int(rng.gauss(4, 2)))
        price = PRODUCTS[product]
        customer = "C%04d-%s" % (rng.randrange(1, 400), rng.choice("AABBBCC"))
        channel = rng.choice([c.value for c in Channel])
        discount = rng.choice([0, 0, 0, 0.05, 0.1])
        if i % 97 == 0:
            qty = "n/a"
        if i % 131 == 0:
            customer = "unknown"
        writer.writerow([day.isoformat(), i, rng.choice(REGIONS), product, qty, price, customer, channel, discount])
    return out.getvalue()


def parse_log(text: str) -> Tuple[List[Order], Counter]:
    orders: List[Order] = []
    problems: Counter = Counter()
    for row in csv.DictReader(io.StringIO(text)):
        try:
            qty = int(row["qty"])
        except ValueError:
            problems["bad quantity"] += 1
            continue
        if not CUSTOMER_RE.match(row["customer"]):
            problems["bad customer"] += 1
            continue
        orders.append(Order(
            day=datetime.strptime(row["date"], "%Y-%m-%d").date(),
            order_id=int(row["id"]),
            region=row["region"],
            product=row["product"],
            quantity=qty,
            unit_price=float(row["price"]),
            customer=row["customer"],
            channel=Channel(row["channel"]),
            discount=float(row["discount"]),
        ))
    orders.sort()
    return orders, problems


def group_by(orders: Iterable[Order], key) -> Dict[str, Summary]:
    groups: Dict[str, Summary] = defaultdict(Summary)
    for o in orders:
        groups[key(o)].add(o)
    return dict(sorted(groups.items()))


def weekly_revenue(orders: Iterable[Order]) -> Dict[int, float]:
    weeks: Dict[int, float] = defaultdict(float)
    for o in orders:
        weeks[o.week()] += o.total
    return {w: round(v, 2) for w, v in sorted(weeks.items())}


def moving_average(values: List[float], window: int) -> List[Optional[float]]:
    out: List[Optional[float]] = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(round(total / window, 2) if i >= window - 1 else None)
    return out


def zscores(values: List[float]) -> List[float]:
    mu = statistics.fmean(values)
    sigma = statistics.pstdev(values) or 1.0
    return [(v - mu) / sigma for v in values]


def anomalies(weeks: Dict[int, float], threshold: float = 1.8) -> List[int]:
    keys = list(weeks)
    scores = zscores(list(weeks.values()))
    return [k for k, z in zip(keys, scores) if abs(z) > threshold]


@lru_cache(maxsize=None)
def tier_weight(tier: str) -> float:
    return {"A": 1.5, "B": 1.0, "C": 0.8}.get(tier, 0.5)


def customer_value(orders: Iterable[Order]) -> List[Tuple[str, float]]:
    value: Dict[str, float] = defaultdict(float)
    for o in orders:
        value[o.customer] += o.total * tier_weight(o.tier)
    ranked = sorted(value.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(c, round(v, 2)) for c, v in ranked[:5]]


def basket_pairs(orders: List[Order]) -> Counter:
    by_day_customer: Dict[Tuple[date, str], set] = defaultdict(set)
    for o in orders:
        by_day_customer[(o.day, o.customer)].add(o.product)
    pairs: Counter = Counter()
    for products in by_day_customer.values():
        items = sorted(products)
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                pairs[(items[i], items[j])] += 1
    return pairs


def price_elasticity(orders: List[Order]) -> Dict[str, float]:
    """A crude elasticity: correlation of discount and quantity per product."""
    result = {}
    for product in PRODUCTS:
        rows = [(o.discount, o.quantity) for o in orders if o.product == product]
        if len(rows) < 3:
            continue
        xs, ys = zip(*rows)
        if len(set(xs)) < 2:
            continue
        result[product] = round(statistics.correlation(xs, ys), 4)
    return result


def channel_mix(orders: Iterable[Order]) -> Dict[str, float]:
    counts = Counter(o.channel.value for o in orders)
    total = sum(counts.values())
    return {k: round(100 * v / total, 1) for k, v in sorted(counts.items())}


def percentile(values: List[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    if lo == hi:
        return ordered[int(k)]
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Report:
    def __init__(self, title: str):
        self.title = title
        self.sections: List[Tuple[str, object]] = []

    def add(self, name: str, value: object) -> "Report":
        self.sections.append((name, value))
        return self

    def render(self) -> str:
        lines = [self.title, "=" * len(self.title)]
        for name, value in self.sections:
            lines.append("")
            lines.append(name)
            lines.append("-" * len(name))
            if isinstance(value, dict):
                width = max((len(str(k)) for k in value), default=0)
                for k, v in value.items():
                    lines.append(f"{str(k):<{width}}  {v}")
            elif isinstance(value, list):
                lines.extend(f"- {item}" for item in value)
            else:
                lines.append(str(value))
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({name: value for name, value in self.sections}, default=str, sort_keys=True)


def export(orders: List[Order], path: str) -> int:
    """Writes the cleaned orders as CSV and returns the number of bytes written."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["day", "id", "region", "product", "qty", "total", "tier", "channel"])
        for o in orders:
            writer.writerow([o.day.isoformat(), o.order_id, o.region, o.product, o.quantity,
                             o.total, o.tier, o.channel.value])
        return f.tell()


def main() -> Dict[str, float]:
    rng = random.Random(SEED)
    log = generate_log(300, rng)
    orders, problems = parse_log(log)
    by_region = group_by(orders, lambda o: o.region)
    by_product = group_by(orders, lambda o: o.product)
    weeks = weekly_revenue(orders)
    totals = [o.total for o in orders]
    report = Report("Order analysis")
    report.add("Data quality", dict(problems))
    report.add("Revenue by region", {k: v.as_dict()["revenue"] for k, v in by_region.items()})
    report.add("Units by product", {k: sum(v.quantities) for k, v in by_product.items()})
    report.add("Weekly revenue (4-week average)", dict(zip(weeks, moving_average(list(weeks.values()), 4))))
    report.add("Anomalous weeks", anomalies(weeks))
    report.add("Top customers", customer_value(orders))
    report.add("Frequent pairs", [f"{a}+{b}: {n}" for (a, b), n in basket_pairs(orders).most_common(3)])
    report.add("Discount/quantity correlation", price_elasticity(orders))
    report.add("Channel mix (%)", channel_mix(orders))
    report.add("Order value percentiles", {p: round(percentile(totals, p), 2) for p in (10, 50, 90, 99)})
    report.add("Export", "%d bytes written to orders_clean.csv" % export(orders, "orders_clean.csv"))
    print(report.render())
    print(len(report.to_json()), "bytes of JSON")
    return {"orders": len(orders), "revenue": round(sum(totals), 2)}


if __name__ == "__main__":
    summary = main()

summary["revenue"]
