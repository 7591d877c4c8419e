# result: 2
import re

log = """2024-05-01 12:00:01 ERROR disk full on /dev/sda1
2024-05-01 12:05:00 INFO backup done
2024-05-02 08:30:12 ERROR timeout contacting db"""
pattern = re.compile(r"^(?P<date>\S+) (?P<time>\S+) (?P<level>[A-Z]+) (?P<msg>.*)$", re.M)
errors = [m.groupdict() for m in pattern.finditer(log) if m["level"] == "ERROR"]
print(errors)
print(re.sub(r"\d", "#", "abc123"))
print(re.findall(r"\b\w{4}\b", "this is a test line"))
len(errors)
