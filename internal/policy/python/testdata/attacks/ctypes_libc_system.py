# expect: python.import
# libc's system() through ctypes.
import ctypes
ctypes.CDLL(None).system('touch /tmp/moat-pwned-ctypes_libc_system'.encode())
