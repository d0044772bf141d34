#!/usr/bin/env bash
# A cluster's own MPI, installed as clusters do: Debian's Open MPI, and mpi4py built against it into a
# virtual environment of its own (beside tfdist), for trying tfdist on a site MPI and for its tests.
#
#   scripts/openmpi-venv.sh create   install openmpi-bin + libopenmpi-dev if missing (apt-get, root), then
#                                    make the venv: tfdist (editable, from this checkout) and mpi4py built
#                                    from source with Open MPI's mpicc (no mpich wheel); idempotent
#   scripts/openmpi-venv.sh path     print the venv's directory (its python: <dir>/bin/python)
#   scripts/openmpi-venv.sh remove   delete the venv (Debian's packages stay)
#
# The venv lives in $TFDIST_OPENMPI_VENV (default ~/.cache/tfdist/openmpi-venv), outside the repository.
# It reuses the project venv's packages (TensorFlow and the rest: --system-site-packages over a venv whose
# base is the project's interpreter would not see them), so only mpi4py is built here: the project
# venv's site-packages follow the new venv's own on its path (a .pth file), so its own mpi4py (linked with
# Open MPI) wins over the project's (the mpi4py wheel, which loads the mpich wheel's MPICH).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
VENV="${TFDIST_OPENMPI_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist/openmpi-venv}"
BASE_VENV="${TFDIST_VENV:-$REPO/.venv}"
MPI4PY_VERSION="${TFDIST_MPI4PY_VERSION:-4.1.*}"
MPICC="${MPICC:-/usr/bin/mpicc.openmpi}"

log() { echo "openmpi-venv: $*" >&2; }

install_packages() {
  if [ -x "$MPICC" ] && command -v mpirun.openmpi >/dev/null; then
    return
  fi
  [ "$(id -u)" = 0 ] || { log "Open MPI is not installed and installing it needs root (apt-get)"; exit 2; }
  log "installing openmpi-bin libopenmpi-dev (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openmpi-bin libopenmpi-dev >/dev/null
}

create() {
  install_packages
  [ -x "$BASE_VENV/bin/python" ] || { log "no project venv at $BASE_VENV (run ./dev setup first)"; exit 2; }
  local py="$VENV/bin/python" own base
  base="$("$BASE_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # Ready when its mpi4py loads Open MPI (as mpi4py names it: MPI is not started).
  if ! { [ -x "$py" ] && "$py" -m mpi4py --mpi-lib-version 2>/dev/null | grep -q '^Open MPI'; }; then
    mkdir -p "$(dirname "$VENV")"
    "$BASE_VENV/bin/python" -m venv --clear --without-pip "$VENV"
    log "building mpi4py ($MPI4PY_VERSION) against Open MPI ($MPICC)"
    # pip of the project venv, installing into this one; --no-binary builds from the source distribution.
    MPICC="$MPICC" "$BASE_VENV/bin/python" -m pip --python "$py" install --quiet --no-deps \
      --ignore-installed --no-binary mpi4py --no-cache-dir "mpi4py==$MPI4PY_VERSION"
    "$py" -c 'import mpi4py; print("openmpi-venv: mpi4py", mpi4py.__version__, mpi4py.get_config())' >&2
  fi
  own="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # Appended after the venv's own site-packages, as a site directory (its own .pth files, tfdist's editable
  # install among them, are read): this venv's mpi4py shadows the project's. Written every time: the venv
  # is one per user, and the checkout that made it may be gone or another one.
  echo "import site; site.addsitedir('$base')" > "$own/zz-tfdist-project-venv.pth"
  log "ready: $VENV (with $BASE_VENV's packages)"
}

case "${1:-}" in
  create) create ;;
  path) echo "$VENV" ;;
  remove) rm -rf "$VENV" ;;
  *) echo "usage: $0 create|path|remove" >&2; exit 2 ;;
esac
