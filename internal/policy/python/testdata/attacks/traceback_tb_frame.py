# expect: python.attribute
def j(*parts):
    return ''.join(parts)


# An exception's traceback leads to the runner's frame.
try:
    1 / 0
except ZeroDivisionError as e:
    frame = getattr(e.__traceback__, j('tb_', 'frame'))
    while frame.f_back is not None:
        frame = frame.f_back
    frame.f_globals['os'].system('touch /tmp/moat-pwned-traceback_tb_frame')
