import logging

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
log = logging.getLogger("analysis")
log.info("starting")
log.warning("3 rows dropped")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("division failed")
log.debug("hidden")
print("done")
