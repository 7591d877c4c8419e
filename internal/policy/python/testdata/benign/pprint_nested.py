# result: "{'v': 1}"
import pprint

data = {"users": [{"id": i, "roles": ["r%d" % j for j in range(i)]} for i in range(4)], "meta": {"v": 1}}
pprint.pprint(data, width=60)
s = pprint.pformat(data["meta"])
s
