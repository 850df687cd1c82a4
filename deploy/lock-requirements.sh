#!/usr/bin/env bash
# Regenerates requirements.lock: the image's runtime dependencies (pyproject.toml's
# [project] dependencies and everything they pull in), pinned with their hashes, for the
# image's platform (Linux x86_64, Python 3.11). Run it after changing those dependencies;
# existing pins are kept unless asked: `deploy/lock-requirements.sh --upgrade` moves every
# pin to the newest allowed, `--upgrade-package NAME` one of them.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/pip install -q 'uv==0.13.9'
.venv/bin/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --custom-compile-command deploy/lock-requirements.sh \
  --quiet --output-file requirements.lock "$@"
