# What untrusted code sees inside a moat box. Run: ./moat run --profile open examples/isolation.py
# (the default profile refuses its socket import before the code runs).
import os, socket

def attempt(what, fn):
    try:
        print(f"{what:<40} {fn()}")
    except OSError as e:
        print(f"{what:<40} refused: {e.strerror}")

attempt("who am I", lambda: f"uid={os.getuid()} gid={os.getgid()} cwd={os.getcwd()}")
attempt("read /etc/shadow", lambda: open("/etc/shadow").read()[:20])
attempt("list /root", lambda: os.listdir("/root"))
attempt("processes visible", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
attempt("write /usr/bin/evil", lambda: open("/usr/bin/evil", "w"))
attempt("connect 1.1.1.1:443", lambda: socket.create_connection(("1.1.1.1", 443), timeout=2))
attempt("environment", lambda: sorted(os.environ))
attempt("write the workspace", lambda: open("notes.txt", "w").write("kept until the box ends") and "ok")
