# result: ['x.txt']
import os
import shutil
import tempfile

os.makedirs("src/inner", exist_ok=True)
with open("src/inner/x.txt", "w") as f:
    f.write("x")
shutil.copytree("src", "dst")
shutil.copy("src/inner/x.txt", "copy.txt")
with tempfile.TemporaryDirectory() as d:
    with tempfile.NamedTemporaryFile("w", dir=d, suffix=".txt", delete=False) as t:
        t.write("temp")
    print(os.path.exists(t.name))
shutil.rmtree("src")
print(shutil.disk_usage(".").total > 0)
sorted(os.listdir("dst/inner"))
