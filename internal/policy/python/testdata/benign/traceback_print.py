import sys
import traceback


def inner():
    raise RuntimeError("boom")


try:
    inner()
except RuntimeError:
    traceback.print_exc(file=sys.stdout)
    etype, value, tb = sys.exc_info()
    frames = traceback.extract_tb(tb)
    print([f.name for f in frames])
print("continued")
