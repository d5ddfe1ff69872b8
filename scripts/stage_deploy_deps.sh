#!/usr/bin/env bash
# Gather here (a Debian/Ubuntu machine with apt and PyPI) what scripts/gpu_deploy_selftest.sh
# needs on a machine that has no sshd, no ssh client, no fabric and no network:
#
#   .deploy-deps/debs/     openssh-server, openssh-client and the shared libraries they
#                          load (never libc6: the target's own glibc is used), as .deb files
#   .deploy-deps/wheels/   fabric, paramiko, textual and everything they need, as wheels for
#                          CPython 3.12 on manylinux x86_64 (the GPU image's Python), at the
#                          versions this project's .venv runs
#   .deploy-deps/MANIFEST  what is there, with versions and sizes
#
# .deploy-deps/ is git-ignored; a device call carries it (carry: [".deploy-deps"]).
#
#   scripts/stage_deploy_deps.sh           # from the repository root; about a minute
#   DEPS=.deploy-deps-py311 PYTHON_VERSION=3.11 scripts/stage_deploy_deps.sh   # for a test here
#
# Needs: apt-get (run `apt-get update` first if apt has no lists), dpkg, ldd, and the
# project's .venv (scripts/setup.sh) for the versions to pin.
set -euo pipefail
cd "$(dirname "$0")/.."

DEPS=${DEPS:-.deploy-deps}
PYVER=${PYTHON_VERSION:-3.12}
PY=.venv/bin/python
ROOT_PACKAGES=(fabric textual)  # the deploying side's needs beyond the GPU image (kdtree deploy, kdtree tui)
SSH_BINARIES=(usr/sbin/sshd usr/bin/ssh usr/bin/ssh-keygen)

die() { echo "stage_deploy_deps: $*" >&2; exit 1; }
[ -x "$PY" ] || die "no .venv here: run scripts/setup.sh first (its versions are the ones staged)"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "needs apt-get and dpkg (Debian/Ubuntu)"

rm -rf "$DEPS"
mkdir -p "$DEPS/debs" "$DEPS/wheels"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# --- Debian packages: OpenSSH, then every library its programs load that libc6 does not ship
echo "==> apt-get download openssh-server openssh-client"
(cd "$DEPS/debs" && apt-get download -q openssh-server openssh-client >/dev/null) \
  || die "apt-get download failed (run apt-get update first?)"
for deb in "$DEPS"/debs/*.deb; do dpkg -x "$deb" "$scratch/root"; done
libs=()
for bin in "${SSH_BINARIES[@]}"; do
  [ -x "$scratch/root/$bin" ] || die "$bin is not in the downloaded packages"
  while read -r path; do libs+=("$path"); done < <(ldd "$scratch/root/$bin" | awk '/=> \//{print $3}')
done
packages=()
for lib in $(printf '%s\n' "${libs[@]}" | sort -u); do
  real=$(readlink -f "$lib")
  owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || true)
  owner=${owner%%:*}
  [ -n "$owner" ] || die "no Debian package owns $lib (needed by the ssh programs)"
  [ "$owner" = libc6 ] && continue  # the target's glibc, never carried
  packages+=("$owner")
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "==> apt-get download ${#packages[@]} library packages: ${packages[*]}"
(cd "$DEPS/debs" && apt-get download -q "${packages[@]}" >/dev/null) || die "apt-get download of the libraries failed"
glibc_needed=$(for bin in "${SSH_BINARIES[@]}"; do objdump -T "$scratch/root/$bin" 2>/dev/null; done \
               | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)

# --- wheels: the resolver for the target's Python and platform, pinned to this .venv's versions
echo "==> pip download ${ROOT_PACKAGES[*]} (+ dependencies) for CPython $PYVER manylinux x86_64"
"$PY" -m pip freeze --exclude-editable 2>/dev/null | grep -v '^-e \|@ file:' > "$scratch/constraints.txt"
pins=()
for name in "${ROOT_PACKAGES[@]}"; do
  pin=$(grep -i "^${name}==" "$scratch/constraints.txt" || true)
  pins+=("${pin:-$name}")
done
PIP_CONSTRAINT= "$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_39_x86_64 --platform any \
  -c "$scratch/constraints.txt" -d "$DEPS/wheels" "${pins[@]}" \
  || die "pip download failed"

# --- manifest
{
  echo "staged $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME") ($(uname -m))"
  echo "ssh programs need glibc >= $glibc_needed on the target (libc6 is not carried)"
  echo "debs:"
  for deb in "$DEPS"/debs/*.deb; do
    echo "  $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version) $(stat -c %s "$deb")"
  done
  echo "wheels (CPython $PYVER, manylinux x86_64):"
  for whl in "$DEPS"/wheels/*.whl; do echo "  $(basename "$whl") $(stat -c %s "$whl")"; done
} > "$DEPS/MANIFEST"
echo "$glibc_needed" > "$DEPS/glibc-needed"
cat "$DEPS/MANIFEST"
echo "==> $(du -sh "$DEPS" | cut -f1) in $DEPS (carry it: the device call's working tree is limited to 64 MiB)"
