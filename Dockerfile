# The application image: the API, the worker and the CLI (`knowledgeops ...`).
# Debian 13 (trixie) pinned: its postgresql-client is 17, and pg_dump refuses a server newer than
# itself (the stack runs PostgreSQL 16), so the maintenance pool's backups need a client at
# least as new as the server. A worker of that pool checks this when it starts.
FROM python:3.11-slim-trixie

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-client \
    && rm -rf /var/lib/apt/lists/*

# Dependencies in a layer of their own: rebuilt only when the lock changes, not with every
# change of the code. Exact versions, each file checked against its hash
# (requirements.lock; deploy/lock-requirements.sh regenerates it from pyproject.toml).
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

COPY pyproject.toml ./
COPY knowledgeops ./knowledgeops
COPY workflows ./workflows
COPY activities ./activities
COPY starter ./starter
COPY migrations ./migrations
COPY worker.py README.md ./
RUN pip install --no-deps . \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin knowledgeops \
    && mkdir /data && chown knowledgeops /data

# Nothing runs as root; everything the application writes goes to /data.
USER knowledgeops
ENV KNOWLEDGEOPS_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8000
# Whichever process this container runs answers on one of its endpoints: the API's /healthz,
# else a worker's metrics (METRICS_ADDRESS); starter/healthcheck.py. The start period covers
# loading the embedding model.
HEALTHCHECK --interval=30s --timeout=10s --start-period=180s --retries=3 \
    CMD ["python", "-m", "starter.healthcheck"]
CMD ["knowledgeops", "worker"]
