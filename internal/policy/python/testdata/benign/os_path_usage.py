# result: 'file.csv'
import os

os.makedirs(os.path.join("out", "sub"), exist_ok=True)
with open(os.path.join("out", "sub", "a.txt"), "w") as f:
    f.write("hello")
print(os.getcwd() == os.path.abspath("."))
print(sorted(os.listdir("out")), os.path.exists("out/sub/a.txt"), os.path.splitext("x.tar.gz"))
found = [os.path.join(root, name) for root, _, names in os.walk("out") for name in names]
print(found, os.environ.get("NOT_SET", "default"), os.sep)
os.rename("out/sub/a.txt", "out/sub/b.txt")
os.remove("out/sub/b.txt")
os.path.basename("/data/file.csv")
