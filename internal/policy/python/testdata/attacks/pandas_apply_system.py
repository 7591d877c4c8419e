# expect: python.process
def j(*parts):
    return ''.join(parts)


# A library calling a callable the program gave it: pandas applies os.system.
import os
import pandas as pd
pd.Series(['touch /tmp/moat-pwned-pandas_apply_system']).apply(getattr(os, j('sys', 'tem')))
