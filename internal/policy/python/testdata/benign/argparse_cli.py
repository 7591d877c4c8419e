# result: (5, ['a.csv', 'b.csv'])
import argparse

parser = argparse.ArgumentParser(description="Summarise a file")
parser.add_argument("--limit", type=int, default=10)
parser.add_argument("--verbose", action="store_true")
parser.add_argument("paths", nargs="*")
args = parser.parse_args(["--limit", "5", "a.csv", "b.csv"])
print(args)
(args.limit, args.paths)
