# result: 'plan'
from dataclasses import asdict, dataclass, field, replace


@dataclass(order=True)
class Task:
    priority: int
    title: str = field(compare=False)
    tags: list = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class Money:
    amount: float
    currency: str = "EUR"


tasks = sorted([Task(3, "write"), Task(1, "plan", ["urgent"]), Task(2, "review")])
print([t.title for t in tasks])
print(asdict(tasks[0]))
m = replace(Money(10.0), amount=12.5)
print(m, m == Money(12.5))
tasks[0].title
