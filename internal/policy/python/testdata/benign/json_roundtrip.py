# result: True
import json

config = {"name": "report", "threshold": 0.75, "tags": ["a", "b"], "nested": {"on": True, "n": None}}
with open("config.json", "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
with open("config.json") as f:
    loaded = json.load(f)
print(json.dumps(loaded, separators=(",", ":")))
loaded == config
