# Image for the scheduler and the one-shot `topics` service of docker-compose.yml.
FROM python:3.11-slim

WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir . \
 && useradd --create-home --uid 10001 scheduler \
 && mkdir -p /var/lib/scheduler \
 && chown scheduler /var/lib/scheduler

# `pip install .` puts the package in site-packages, away from the repository's
# topologies/, so the layout file is named explicitly.
ENV SCHEDULER_TOPOLOGY_FILE=/app/topologies/scheduler.toml \
    SCHEDULER_STATE_DIR=/var/lib/scheduler \
    PYTHONUNBUFFERED=1

USER scheduler
ENTRYPOINT ["scheduler"]
CMD ["run"]
