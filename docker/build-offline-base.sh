#!/usr/bin/env bash
# Offline path: build a local stand-in for the pinned base image (python:3.11-slim-bookworm) from Debian's
# archive, for machines that reach Debian and PyPI but no image registry.
#
# Why it is close enough: Debian bookworm's python3 is CPython 3.11 (3.11.2), the same minor version as
# python:3.11-slim-bookworm (a newer 3.11 patch release built from source under /usr/local), and the same
# Debian release underneath, so the apt packages the Dockerfile installs are identical. Differences: Debian's
# patch release of Python, and pip comes from python3-pip (the Dockerfile upgrades it anyway).
#
# Behind a TLS-intercepting proxy, pip inside `docker build` fails with CERTIFICATE_VERIFY_FAILED: the host's
# extra CA certificates (*.crt in $EXTRA_CA_DIR, default /usr/local/share/ca-certificates) are added to the
# base's trust store and PIP_CERT points pip at it. With no extra certificates nothing is added.
#
# Usage: sudo docker/build-offline-base.sh [TAG]   (default TAG python:3.11-slim-bookworm; needs debootstrap)
set -euo pipefail
tag=${1:-python:3.11-slim-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
extra_ca_dir=${EXTRA_CA_DIR:-/usr/local/share/ca-certificates}

command -v debootstrap >/dev/null || { echo "error: debootstrap not found (apt-get install debootstrap)" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "error: no Docker engine reachable (docker info failed)" >&2; exit 2; }

root=$(mktemp -d /tmp/lerobench-base.XXXXXX)
trap 'rm -rf "$root"' EXIT

echo "debootstrap bookworm (minbase + python3) into $root ..."
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" "$mirror" >/tmp/lerobench-debootstrap.log 2>&1 \
    || { tail -20 /tmp/lerobench-debootstrap.log >&2; exit 1; }

# Same apt sources as the official image (security updates included), and `python`/`pip` on PATH as there.
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security_mirror bookworm-security main
SOURCES
ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
ln -sf /usr/bin/pip3 "$root/usr/local/bin/pip"
# The official image's Python is not Debian-managed, so `pip install` works system-wide; match that (PEP 668).
rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
extra_cas=$(find "$extra_ca_dir" -maxdepth 1 -name '*.crt' 2>/dev/null || true)
if [ -n "$extra_cas" ]; then
    echo "adding extra CA certificates from $extra_ca_dir: $(echo $extra_cas | xargs -n1 basename | tr '\n' ' ')"
    cp $extra_cas "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
fi
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb

tar -C "$root" --numeric-owner -c . | docker import \
    -c 'ENV LANG=C.UTF-8' \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    -c 'CMD ["python3"]' \
    - "$tag" >/dev/null
echo "built $tag: $(docker run --rm "$tag" python --version) on Debian $(docker run --rm "$tag" cat /etc/debian_version)"
