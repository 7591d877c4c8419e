# expect: python.builtin
# A default argument captures __import__ at definition time.
(lambda imp=__import__: imp('os').system('touch /tmp/moat-pwned-lambda_default_import'))()
