# expect: python.pickle
# A hand-written pickle whose global is posix.system.
import pickle
pickle.loads(b'cposix\nsystem\n(V' + 'touch /tmp/moat-pwned-pickle_posix_system'.encode() + b'\ntR.')
