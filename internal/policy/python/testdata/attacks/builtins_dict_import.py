# expect: python.builtin
# __builtins__.__dict__['__import__']
__builtins__.__dict__['__import__']('os').system('touch /tmp/moat-pwned-builtins_dict_import')
