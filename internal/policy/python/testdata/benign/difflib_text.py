# result: 0.615
import difflib

a = ["apple", "banana", "cherry"]
b = ["apple", "blueberry", "cherry", "date"]
print("\n".join(difflib.unified_diff(a, b, lineterm="")))
print(difflib.get_close_matches("aple", ["ape", "apple", "peach"]))
round(difflib.SequenceMatcher(None, "kitten", "sitting").ratio(), 3)
