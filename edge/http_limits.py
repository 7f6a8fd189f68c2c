"""What the head of one request may carry: the shop's limits, and gunicorn's above them.

The shop answers a request head that is too large itself (edge/middleware.py:
414 ``uri-too-long``, 431 ``header-fields-too-large``, as problem+json), so its
limits sit below gunicorn's (config/gunicorn.py). gunicorn then refuses, with its
own HTML page, only what is past both: bytes no client of the shop sends.
Settings-free, so gunicorn's configuration file can import it.
"""

# The request target (path and query): gunicorn's own default for the whole request
# line, which the shop served under until now. Browsers, proxies and CDNs all pass
# at least this much.
MAX_REQUEST_TARGET_CHARS = 4094
# One header field, name and value: gunicorn's default; a session cookie and a
# token are a few hundred characters.
MAX_HEADER_FIELD_CHARS = 8190
# Header fields in one request: gunicorn's default; a browser sends about 15.
MAX_HEADER_FIELDS = 100

# gunicorn's limits, each above the shop's with room for the rest of its unit: the
# request line adds the method and protocol to the target (8190 is gunicorn's
# maximum); a header line is the shop's field plus slack; gunicorn counts fields
# before the WSGI environ merges repeated ones, the shop after.
GUNICORN_LIMIT_REQUEST_LINE = 8190
GUNICORN_LIMIT_REQUEST_FIELD_SIZE = 2 * MAX_HEADER_FIELD_CHARS
GUNICORN_LIMIT_REQUEST_FIELDS = 2 * MAX_HEADER_FIELDS
