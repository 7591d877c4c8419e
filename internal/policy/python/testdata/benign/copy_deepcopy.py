# result: (2, 20)
import copy

original = {"a": [1, 2], "b": {"c": [3]}}
shallow = copy.copy(original)
deep = copy.deepcopy(original)
original["a"].append(99)
print(shallow["a"], deep["a"])


class Node:
    def __init__(self, v, children=()):
        self.v = v
        self.children = list(children)


tree = Node(1, [Node(2), Node(3)])
clone = copy.deepcopy(tree)
clone.children[0].v = 20
(tree.children[0].v, clone.children[0].v)
