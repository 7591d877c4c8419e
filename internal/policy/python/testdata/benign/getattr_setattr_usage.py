# result: 'ABC'
# Ordinary dynamic attribute use: getattr/setattr/hasattr with ordinary names.
class Config:
    debug = False


cfg = Config()
for key, value in {"debug": True, "level": 3}.items():
    setattr(cfg, key, value)
print(getattr(cfg, "level", None), hasattr(cfg, "missing"), vars(cfg))
name = "upper"
getattr("abc", name)()
