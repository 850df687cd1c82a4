# The application image: the API, the worker and the CLI (`knowledgeops ...`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# Dependencies in a layer of their own: rebuilt only when pyproject.toml changes, not with
# every change of the code.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

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
CMD ["knowledgeops", "worker"]
