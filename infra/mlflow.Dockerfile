# MLflow tracking server for infra/docker-compose.yml: Postgres metadata, artifacts proxied to S3.
# The upstream image lacks the Postgres driver and boto3, hence this small image.
FROM python:3.11-slim
RUN pip install --no-cache-dir "mlflow==3.17.2" psycopg2-binary boto3
ENV MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_ENABLE_TELEMETRY=false DO_NOT_TRACK=true
EXPOSE 5000
