# result: [42, 'age: negative', 'age: not a number']
import traceback


class ValidationError(ValueError):
    def __init__(self, field, message):
        super().__init__(f"{field}: {message}")
        self.field = field


def parse_age(text):
    try:
        age = int(text)
    except ValueError as e:
        raise ValidationError("age", "not a number") from e
    else:
        if age < 0:
            raise ValidationError("age", "negative")
        return age
    finally:
        print("parsed", repr(text))


results = []
for value in ["42", "-1", "abc"]:
    try:
        results.append(parse_age(value))
    except ValidationError as e:
        results.append(str(e))
        if e.__cause__ is not None:
            print("cause:", type(e.__cause__).__name__)
try:
    {}["missing"]
except KeyError:
    text = traceback.format_exc()
    print(text.splitlines()[-1])
results
