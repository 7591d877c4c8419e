# result: {'rows': 3, 'ok': True, 'cols': 2}
summary = {"rows": 3, "ok": True}
summary["cols"] = 2
summary
