# result: 5050
matrix = [[i * 3 + j for j in range(3)] for i in range(3)]
transposed = [list(row) for row in zip(*matrix)]
flat = [x for row in matrix for x in row if x % 2 == 0]
squares = {x: x * x for x in range(5)}
unique_lengths = {len(w) for w in ["a", "bb", "cc", "ddd"]}
print(matrix, transposed, flat, squares, unique_lengths, sep="\n")
sum(x for x in range(101))
