# expect: python.pickle
import pickle
pickle.loads(b"cbuiltins\neval\n(V__import__('os').system(" + repr('touch /tmp/moat-pwned-pickle_builtins_eval').encode() + b")\ntR.")
