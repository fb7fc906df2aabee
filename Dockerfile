# syntax=docker/dockerfile:1
# One image for every Trellis process; the Deployment picks the module:
#   python -m gateway | services.orchestrator | services.llm_gateway | services.retrieval | services.sandbox
# Build: docker build -t trellis:dev .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: compilers, the project's dependencies, generated protos -------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
 && rm -rf /var/lib/apt/lists/*
# uv, hashed, outside the venv (the runtime stage does not need it).
COPY requirements/tools.lock requirements/
RUN pip install --require-hashes -r requirements/tools.lock
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app

# Dependencies first, from the locks alone, so a source change does not rebuild them: runtime.lock exactly
# (the versions `make test` ran with, see scripts/lock.sh). Then llama-cpp-python, which the lock leaves out: it
# compiles from source for the x86-64 baseline, so the image runs on any x86-64 host, not just this one.
COPY requirements/runtime.lock requirements/llama-cpp-python.lock requirements/models.lock requirements/
COPY scripts/install_llama_cpp.sh scripts/install_extras.sh scripts/
RUN uv pip sync --python /opt/venv/bin/python --require-hashes requirements/runtime.lock \
 && bash scripts/install_llama_cpp.sh python \
 && TRELLIS_SKIP_TEST_PACKAGES=1 bash scripts/install_extras.sh python

COPY . .
# Editable: the code stays in /app (one copy), and the `trellis` command works too.
RUN pip install --no-deps -e . \
 && python scripts/gen_protos.py --force \
 && python -m compileall -q services gateway trellis_cli gen/python

# --- runtime: no compilers, a non-root user -----------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
# tini as PID 1 forwards SIGTERM and reaps the sandbox's children; libgomp1 for llama.cpp's threads;
# nodejs runs the sandbox's JavaScript (services/sandbox finds `node` on PATH).
# install_system_deps.sh adds whatever else the stack needs from Debian (the same list `make` uses).
COPY scripts/install_system_deps.sh /tmp/install_system_deps.sh
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini libgomp1 nodejs \
 && TRELLIS_SKIP_TEST_PACKAGES=1 bash /tmp/install_system_deps.sh \
 && rm -rf /var/lib/apt/lists/* /tmp/install_system_deps.sh
RUN groupadd --system --gid 10001 trellis \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin trellis \
 && install -d -o 10001 -g 10001 /data  # TRELLIS_DATA_DIR for `docker run`; an emptyDir in the cluster
# Same paths as in the builder: the venv's .pth files point at /app and /app/gen/python.
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app
# The root filesystem is read-only in the cluster: byte code is compiled in the builder, caches go to /tmp.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    TRELLIS_DATA_DIR=/data
# The allocator (TRELLIS_ALLOCATOR's default, `jemalloc`: services/common/speed_policies.py AllocatorPolicy, which
# `trellis up` applies itself); libjemalloc2 comes with install_system_deps.sh. A part keeps it to itself: what it
# starts (a browser, a tool's subprocess) gets the system's allocator. Set the three empty for pymalloc.
ENV LD_PRELOAD=libjemalloc.so.2 \
    PYTHONMALLOC=malloc \
    MALLOC_CONF=background_thread:true
WORKDIR /app
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
EXPOSE 8080 50051 50052 50053 50054 9091 9092 9093 9094
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-m", "gateway"]
