# OnceShop image: the shop's web, worker and beat processes, given a real PostgreSQL
# and Redis by DATABASE_URL / REDIS_URL (docker-compose.prod.yml; the demo's is
# docker-compose.yml). The embedded servers of `make demo` are not in it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/onceshop-metrics

WORKDIR /app
RUN useradd --create-home --uid 10001 onceshop

# The locked versions, every file checked against its hash; no resolution at build.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

# What is copied is filtered by .dockerignore: no .git, .venv, .var or bench output.
COPY . .
# The translation catalogues, compiled (build output, not in git).
RUN python -m config.i18n
# collectstatic only copies files: it runs in the demo profile, which needs no
# secrets, with URLs it never connects to. The image itself runs in production.
RUN DEMO_MODE=true DATABASE_URL=postgres://build/unused REDIS_URL=redis://build \
    python manage.py collectstatic --no-input -v 0

USER onceshop
EXPOSE 8000
# Liveness: the process answers (/healthz touches no dependency, so an outage of the
# database does not get every container restarted). Readiness is /readyz: the
# compose files gate on it (docs/operating.md).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=3)"]
# gthread: a slow provider call blocks one thread, not a worker. config.gunicorn holds
# the metrics hooks (multiprocess directory, dead workers).
CMD ["gunicorn", "config.wsgi:application", "--config", "python:config.gunicorn", \
     "--bind", "0.0.0.0:8000", \
     "--worker-class", "gthread", "--workers", "2", "--threads", "8", "--timeout", "60"]
