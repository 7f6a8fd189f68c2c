# OnceShop image: the same code and settings as `make demo`, with external
# PostgreSQL and Redis given by DATABASE_URL / REDIS_URL (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
RUN useradd --create-home --uid 10001 onceshop

# The project installs one package, the API client (the app runs from /app).
COPY pyproject.toml README.md ./
COPY onceshop_client/ ./onceshop_client/
RUN pip install --upgrade pip && pip install .

COPY . .
# Placeholder URLs: collectstatic imports the settings but connects to nothing.
RUN DATABASE_URL=postgres://build/unused REDIS_URL=redis://build \
    python manage.py collectstatic --no-input -v 0

USER onceshop
EXPOSE 8000
# gthread: the demo shop calls the sandbox provider on this same server.
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", \
     "--worker-class", "gthread", "--workers", "2", "--threads", "8", "--timeout", "60"]
