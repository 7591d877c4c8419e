# expect: python.import
import multiprocessing


def work():
    open('/tmp/moat-pwned-multiprocessing_process', 'w').close()


if __name__ == '__main__':
    p = multiprocessing.get_context('fork').Process(target=work)
    p.start()
    p.join()
