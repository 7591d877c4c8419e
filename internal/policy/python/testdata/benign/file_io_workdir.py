# result: ['buy milk', 'write report']
from pathlib import Path

Path("notes").mkdir(exist_ok=True)
p = Path("notes") / "todo.txt"
p.write_text("buy milk\n")
with open(p, "a") as f:
    f.write("write report\n")
lines = p.read_text().splitlines()
Path("notes/data.bin").write_bytes(bytes(range(5)))
print(sorted(x.name for x in Path("notes").glob("*")))
print(Path("notes/data.bin").stat().st_size, p.suffix, p.stem)
lines
