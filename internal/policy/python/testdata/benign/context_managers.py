# result: (True, True, 'captured\n')
import contextlib
import io


class Timer:
    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, exc_type, exc, tb):
        self.exited = True
        return False


@contextlib.contextmanager
def tag(name):
    print(f"<{name}>")
    try:
        yield name
    finally:
        print(f"</{name}>")


with Timer() as t, tag("p") as name:
    print("inside", name)
with contextlib.suppress(ZeroDivisionError):
    1 / 0
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    print("captured")
with contextlib.ExitStack() as stack:
    files = [stack.enter_context(open(f"part{i}.txt", "w")) for i in range(2)]
    for f in files:
        f.write("x")
(t.entered, t.exited, buf.getvalue())
