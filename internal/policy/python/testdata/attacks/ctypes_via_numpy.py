# expect: python.ctypes
def j(*parts):
    return ''.join(parts)


# numpy exposes ctypes as an attribute: reach it without importing it.
import numpy as np
ct = getattr(np.ctypeslib, j('cty', 'pes'))
ct.CDLL(None).system('touch /tmp/moat-pwned-ctypes_via_numpy'.encode())
