#!/usr/bin/env bash
# Sets up a fresh machine for `make test` and `make demo`: the Debian packages the
# tests run for real (etcd, HAProxy; the node's containerd, runc and CNI plugins; buildah and
# debootstrap for the image; gcc for the sandbox image; shellcheck for the shell scripts) and a
# virtualenv with the Python dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need_apt+=(etcd-client)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
command -v containerd >/dev/null 2>&1 || need_apt+=(containerd)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
{ command -v gcc >/dev/null 2>&1 && [ -e "$(gcc -print-file-name=libc.a)" ]; } || need_apt+=(gcc libc6-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${need_apt[*]}"
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "bootstrap: cannot install ${need_apt[*]}: not root and no sudo. Install them with apt-get and retry." >&2
    exit 1
  fi
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"; } >/tmp/kcpshard-apt.log 2>&1; then
    echo "bootstrap: apt-get could not install ${need_apt[*]}; see /tmp/kcpshard-apt.log" >&2
    exit 1
  fi
  # The packages start system services we do not use: the tests start their own.
  for svc in etcd haproxy containerd; do
    if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; fi
    if [ -x "/etc/init.d/$svc" ]; then $SUDO "/etc/init.d/$svc" stop >/dev/null 2>&1 || true; fi
  done
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.stamp-$(cat pyproject.toml testkit/pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing Python dependencies"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[dev]' -e './testkit[dev]'
  rm -f .venv/.stamp-*
  touch "$stamp"
fi

