# result: [('b',), ('c',)]
import sqlite3

con = sqlite3.connect(":memory:")
cur = con.cursor()
cur.execute("CREATE TABLE t (name TEXT, score INTEGER)")
cur.executemany("INSERT INTO t VALUES (?, ?)", [("a", 3), ("b", 9), ("c", 6)])
con.commit()
rows = cur.execute("SELECT name FROM t WHERE score > ? ORDER BY score DESC", (4,)).fetchall()
con.close()
rows
