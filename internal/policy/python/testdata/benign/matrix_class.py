# result: Matrix([[7, 10], [15, 22]])
class Matrix:
    def __init__(self, rows):
        self.rows = [list(r) for r in rows]

    def __matmul__(self, other):
        cols = list(zip(*other.rows))
        return Matrix([[sum(a * b for a, b in zip(r, c)) for c in cols] for r in self.rows])

    def __getitem__(self, idx):
        i, j = idx
        return self.rows[i][j]

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __repr__(self):
        return f"Matrix({self.rows})"


m = Matrix([[1, 2], [3, 4]])
identity = Matrix([[1, 0], [0, 1]])
print(m @ identity, len(m), m[1, 0], [sum(r) for r in m])
m @ m
