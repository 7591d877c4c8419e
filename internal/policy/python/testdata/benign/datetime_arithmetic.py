# result: 359
from datetime import date, datetime, timedelta, timezone

start = datetime(2024, 1, 31, 9, 30, tzinfo=timezone.utc)
later = start + timedelta(days=30, hours=5)
print(later.isoformat())
print(later.strftime("%A %d %B %Y"))
parsed = datetime.strptime("2024-03-15 14:00", "%Y-%m-%d %H:%M")
print((parsed - datetime(2024, 1, 1)).days)
(date(2024, 12, 25) - date(2024, 1, 1)).days
