# expect: python.import
import importlib
importlib.__import__('os').system('touch /tmp/moat-pwned-importlib_dunder_import')
