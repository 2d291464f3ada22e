# The tiling service on the shipped tables (no NPU, no database server needed).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tiling_model tiling_model
COPY kernel kernel
COPY tuner tuner
COPY service service
RUN pip install --no-cache-dir .
EXPOSE 8000
CMD ["python", "-m", "service", "--host", "0.0.0.0", "--port", "8000"]
