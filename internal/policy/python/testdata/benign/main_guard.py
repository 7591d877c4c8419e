import sys


def main(argv):
    print("args:", argv[1:])
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    print("main done with", code)
