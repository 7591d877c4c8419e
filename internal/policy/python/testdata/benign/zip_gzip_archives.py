# result: ['a.txt', 'b/c.txt']
import gzip
import zipfile

with gzip.open("log.txt.gz", "wt") as f:
    f.write("line1\nline2\n")
with gzip.open("log.txt.gz", "rt") as f:
    print(f.read().splitlines())
with zipfile.ZipFile("bundle.zip", "w") as z:
    z.writestr("a.txt", "alpha")
    z.writestr("b/c.txt", "gamma")
with zipfile.ZipFile("bundle.zip") as z:
    names = z.namelist()
    print(z.read("a.txt"))
names
