# expect: python.attribute
# The classic gadget: walk object.__subclasses__() to os._wrap_close and its globals.
for c in ().__class__.__bases__[0].__subclasses__():
    if c.__name__ == '_wrap_close':
        c.__init__.__globals__['system']('touch /tmp/moat-pwned-subclasses_wrap_close')
