#!/bin/sh
# Fail when a shared library in site-packages needs a system library the image lacks (ldd: "not found").
# Catches the missing-apt-package class of bug (e.g. opencv's libgthread-2.0.so.0) at build time, not at the
# first LIBERO reset. Usage: docker/check-shared-libs.sh [DIR...]   (default: every site-packages directory)
set -eu
[ $# -gt 0 ] || set -- $(python -c 'import os, site; print(" ".join(p for p in site.getsitepackages() if os.path.isdir(p)))')
site="$*"
# A wheel's own libraries are found next to the library or one level up (mujoco/plugin/*.so need mujoco's
# libmujoco.so, which `import mujoco` has loaded before any plugin): only what is missing beyond them counts.
missing=$(find "$@" -name '*.so*' -type f | while read -r lib; do
    dir=$(dirname "$lib")
    LD_LIBRARY_PATH="$dir:$(dirname "$dir")" ldd "$lib" 2>/dev/null | grep 'not found' | sed "s|^|$lib: |" || true
done)
count=$(find "$@" -name '*.so*' -type f | wc -l)
if [ -n "$missing" ]; then
    echo "$missing"
    echo "error: shared libraries above need system libraries that are not installed (apt-get install ...)" >&2
    exit 1
fi
echo "checked $count shared libraries under $site: none has a missing dependency"
