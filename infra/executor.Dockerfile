# The executor image for the sandbox's docker backend: Debian bookworm with python3 and nothing
# else, running as nobody (65534). The backend starts one container per worker from it with no
# network, a read-only root, a tmpfs /tmp, no capabilities and memory/pids limits.
#
#   docker build -t selfplay-executor:latest -f infra/executor.Dockerfile infra
#
# Without a registry (no base image to pull), infra/build_executor_image.sh builds an equivalent
# image from a debootstrapped root file system with `docker import`.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && python3 -c "import sys; assert sys.version_info >= (3, 11), sys.version" \
 && python3 -m compileall -q /usr/lib/python3.11 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc /usr/share/man /usr/share/locale
ENV PATH=/usr/bin:/bin LANG=C.UTF-8
WORKDIR /tmp
USER 65534:65534
CMD ["python3"]
