# result: (7, -2, 1099511627776)
import struct

packed = struct.pack("<IhQ", 7, -2, 2 ** 40)
print(len(packed), packed.hex())
with open("record.bin", "wb") as f:
    f.write(packed)
with open("record.bin", "rb") as f:
    data = f.read()
struct.unpack("<IhQ", data)
