# expect: python.attribute
# A module's __loader__ loads modules without an import statement.
import sys
posix = sys.__loader__.load_module('posix')
posix.system('touch /tmp/moat-pwned-loader_load_module')
