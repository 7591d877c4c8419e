# expect: python.import
# logging.config imports and calls any dotted name given as a factory: a library
# importing on the program's behalf.
import logging.config
logging.config.dictConfig({
    'version': 1,
    'handlers': {'h': {'()': 'subprocess.Popen', 'args': ['touch', '/tmp/moat-pwned-logging_config_factory']}},
})
