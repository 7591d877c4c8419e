# result: 'Creme'
import unicodedata

s = "Crème brûlée – naïve café"
plain = "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))
print(plain, s.upper(), len(s.encode("utf-8")))
print(unicodedata.name("é"), "straße".casefold())
plain.split()[0]
