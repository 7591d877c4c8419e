# result: 'cfbff0d1-9375-5685-968c-48ce8b15ae17'
import time
import uuid

t0 = time.perf_counter()
time.sleep(0.01)
elapsed = time.perf_counter() - t0
print(elapsed >= 0.01, time.strftime("%Y", time.gmtime(0)))
u = uuid.uuid4()
print(len(str(u)), u.version, uuid.uuid5(uuid.NAMESPACE_DNS, "example.com"))
str(uuid.uuid5(uuid.NAMESPACE_DNS, "example.com"))
