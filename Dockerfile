# One image for the operator, the host agent and the front agent (`kcpshard operator|agent slot|agent front`).
# kcp itself is not in it: slots run the kcp binary named by spec.kcp.binary on the node (hostPath),
# or use spec.kcp.image for an image that carries both kcp and this package.
#
# The build context holds only wheels/: the product and its dependencies, built on the host, so the build
# needs no package index. `make image` (hack/image.sh) builds them, then this file with buildah on a local
# Debian base. With Docker, the same build:
#   docker build --build-arg BASE=debian:bookworm-slim -f Dockerfile -t kcpshard:0.1.0 "$(hack/image.sh context)"
ARG BASE=debian:bookworm-slim
FROM ${BASE}

# Debian's Python 3.11 (the wheels are built for CPython 3.11); haproxy for the front agent, etcdctl for
# the backup agent.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv haproxy etcd-client \
 && apt-get clean && rm -rf /var/lib/apt/lists/*

# A venv: pip stays out of Debian's own Python (PEP 668). The test kit's image adds to the same venv.
COPY wheels/ /tmp/wheels/
RUN python3 -m venv /opt/kcpshard \
 && /opt/kcpshard/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels kcpshard \
 && rm -rf /tmp/wheels
ENV PATH=/opt/kcpshard/bin:$PATH

# kopf names its peer after getpass.getuser(), which needs a passwd entry for the uid: without one the
# operator dies at start (KeyError: 'getpwuid(): uid not found: 65532').
RUN groupadd --system --gid 65532 kcpshard \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin kcpshard
USER 65532:65532
ENTRYPOINT ["kcpshard"]
