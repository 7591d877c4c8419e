# expect: python.import
# importlib.import_module('os').system
import importlib
importlib.import_module('os').system('touch /tmp/moat-pwned-importlib_import_module')
