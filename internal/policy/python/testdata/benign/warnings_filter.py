# result: 1
import warnings


def old_api():
    warnings.warn("old_api is deprecated", DeprecationWarning, stacklevel=2)
    return 1


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old_api()
print([str(w.message) for w in caught])
warnings.warn("visible warning")
len(caught)
