# expect: python.attribute
def j(*parts):
    return ''.join(parts)


# A running generator's frame leads to its callers' frames and globals.
def gen():
    frame = getattr(me, j('gi_', 'frame'))
    while frame is not None:
        mod = frame.f_globals.get('os')
        if mod is not None and frame.f_globals is not globals():
            mod.system('touch /tmp/moat-pwned-generator_gi_frame')
            break
        frame = frame.f_back
    yield
me = gen()
next(me)
