# bcetune tiling service on the shipped tables (no NPU, no database server needed).
#   docker build -t bcetune .                                   # service only
#   docker build --build-arg EXTRAS='[npu]' -t bcetune-npu .   # with torch_npu, for NPU hosts
#   docker run --rm -p 8000:8000 bcetune
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# the cost model's engine is C++ bound to Python (nanobind): the wheel is compiled here, run without a compiler.
# Debian stable's compiler, whichever point release the base image has (a pin would break on the next one).
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends g++ python3-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml constraints.txt README.md CMakeLists.txt LICENSE ./
COPY tiling_model tiling_model
COPY model_tools model_tools
COPY kernel kernel
COPY tuner tuner
COPY service service
ARG EXTRAS=""
# the versions CI tested (constraints.txt)
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints.txt ".${EXTRAS}"

FROM ${PYTHON_IMAGE}
RUN useradd --create-home --uid 10001 bcetune
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels /wheels/*.whl && rm -rf /wheels
USER 10001
WORKDIR /home/bcetune
ENV BCETUNE_HOST=0.0.0.0 BCETUNE_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["python", "-m", "service"]
