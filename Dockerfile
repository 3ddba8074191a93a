# One image for the operator, the host agent and the front agent (`kcpshard operator|agent slot|agent front`).
# kcp itself is not in it: slots run the kcp binary named by spec.kcp.binary on the node (hostPath),
# or use spec.kcp.image for an image that carries both kcp and this package.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends haproxy etcd-client \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir . && rm -rf /src
USER 65532:65532
ENTRYPOINT ["kcpshard"]
