# result: 10
import calendar
from datetime import datetime
from zoneinfo import ZoneInfo

print(calendar.month(2024, 2))
print(calendar.isleap(2024), calendar.monthrange(2024, 2))
t = datetime(2024, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Oslo"))
t.astimezone(ZoneInfo("UTC")).hour
