#!/usr/bin/env bash
# `kdtree deploy` end to end on ONE machine that is its own remote: an OpenSSH server on
# its loopback (unpacked from .deploy-deps/ into a prefix, never over /), `kdtree hosts`,
# a first deploy (sync, per-release environment, build with the auto-detected arch, the
# native tests with their GPU cases, the engine check once the tree has it), a second
# deploy after changing one source file, and `kdtree tui --host` watching a run there.
#
#   scripts/stage_deploy_deps.sh                   # first, on a machine with apt and PyPI
#   OUT=DIR scripts/gpu_deploy_selftest.sh         # on the GPU machine, from the repo root
#   OUT=DIR scripts/gpu_deploy_selftest.sh --no-gpu   # the same flow without a GPU (CPU
#                                                     # build subset, CPU run): test it here
#
# Environment: OUT (results; default a temp dir), PYTHON (default python3: the Python that
# runs kdtree on both sides), DEPS (default .deploy-deps), KDTREE_COMMIT (written into the
# summary when the tree has no .git), SELFTEST_PREFIX (default /tmp/kdtree-selftest; wiped).
#
# Writes to $OUT (at most 8 files): summary.md, deploy1.log, deploy2.log, hosts.txt,
# tui-midrun.svg, tui-end.svg, tui.log, selftest-files.tgz (both deploys' results folders,
# the sshd log, the hosts entry, the TUI's JSON summaries, any failed deploy's kept logs).
# Needs root (sshd's privilege-separation user and /run/sshd). Exit status 0 when every
# step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

GPU=1
[ "${1:-}" = "--no-gpu" ] && GPU=0
OUT=${OUT:-$(mktemp -d -t kdtree-selftest-out.XXXXXX)}
PYTHON=${PYTHON:-python3}
DEPS=$(cd "${DEPS:-.deploy-deps}" 2>/dev/null && pwd) || DEPS=""
PREFIX=${SELFTEST_PREFIX:-/tmp/kdtree-selftest}
HOST=h200-loopback
ALIAS=kdtree-loopback
export PYTHONUNBUFFERED=1
status=0
declare -a rows=()

die() { echo "gpu_deploy_selftest: $*" >&2; echo "FAILED: $*" >> "$OUT/summary.md"; exit 1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
row() { rows+=("$(printf '| %s | %s | %s |' "$1" "$2" "$3")"); [ "$2" = ok ] || status=1; }

mkdir -p "$OUT"
: > "$OUT/summary.md"
[ -n "$DEPS" ] && [ -d "$DEPS/debs" ] && [ -d "$DEPS/wheels" ] \
  || die "no ${DEPS:-.deploy-deps}/debs and wheels: run scripts/stage_deploy_deps.sh first (and carry .deploy-deps)"
[ "$(id -u)" = 0 ] || die "needs root: sshd's privilege separation (user sshd, /run/sshd)"
PYTHON=$(command -v "$PYTHON") || die "no Python ($PYTHON)"
need_glibc=$(cat "$DEPS/glibc-needed" 2>/dev/null || echo 0)
have_glibc=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]*\.[0-9]*$')
[ "$(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1)" = "$need_glibc" ] \
  || die "the staged OpenSSH needs glibc >= $need_glibc, this machine has $have_glibc: stage on an older distribution"

# ------------------------------------------------------------------ 1. OpenSSH in a prefix
rm -rf "$PREFIX" && mkdir -p "$PREFIX"/{bin,libs,etc,config/kdtree,state,results,collect}
t0=$(now)
for deb in "$DEPS"/debs/*.deb; do dpkg -x "$deb" "$PREFIX/root" || die "dpkg -x $deb failed"; done
SSH_ROOT=$PREFIX/root
# link only the libraries this machine lacks (its own are newer, and built for it)
for round in 1 2 3 4 5 6; do
  missing=$(for b in usr/sbin/sshd usr/bin/ssh usr/bin/ssh-keygen; do
              LD_LIBRARY_PATH=$PREFIX/libs ldd "$SSH_ROOT/$b" 2>/dev/null | awk '/not found/{print $1}'; done | sort -u)
  [ -z "$missing" ] && break
  for lib in $missing; do
    found=$(find "$SSH_ROOT/lib" "$SSH_ROOT/usr/lib" -name "$lib" 2>/dev/null | head -1)
    [ -n "$found" ] || die "$lib is needed by OpenSSH but neither this machine nor $DEPS/debs has it"
    ln -sf "$found" "$PREFIX/libs/$lib"
  done
done
for b in usr/sbin/sshd usr/bin/ssh usr/bin/ssh-keygen; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$PREFIX/libs" "$SSH_ROOT/$b" > "$PREFIX/bin/$(basename "$b")"
  chmod +x "$PREFIX/bin/$(basename "$b")"
done
export PATH=$PREFIX/bin:$PATH
ssh -V 2>"$PREFIX/ssh-version.txt" || die "the unpacked ssh does not run: $(cat "$PREFIX/ssh-version.txt")"
carried_libs=$(ls "$PREFIX/libs" | tr '\n' ' ')

# ------------------------------------------------------------------ 2. wheels for the deploying side
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  --target "$PREFIX/site" "$DEPS"/wheels/*.whl > "$PREFIX/pip.log" 2>&1 || die "pip install of the wheels failed: $(tail -5 "$PREFIX/pip.log")"
export PYTHONPATH=$PREFIX/site
"$PYTHON" -c 'import fabric, paramiko, textual' || die "fabric/paramiko/textual do not import from $PREFIX/site"
row "OpenSSH + wheels in $PREFIX" ok "$(secs "$t0" "$(now)") s; $(cat "$PREFIX/ssh-version.txt"); libraries carried: ${carried_libs:-none}"

# ------------------------------------------------------------------ 3. sshd on loopback, keys only
getent passwd sshd >/dev/null || useradd --system --no-create-home --home-dir /run/sshd \
  --shell /usr/sbin/nologin sshd || die "cannot create sshd's privilege-separation user"
mkdir -p /run/sshd && chmod 0755 /run/sshd
ssh-keygen -q -t ed25519 -N '' -C kdtree-selftest-host -f "$PREFIX/etc/host_key" || die "ssh-keygen failed"
ssh-keygen -q -t ed25519 -N '' -C kdtree-selftest-client -f "$PREFIX/etc/client_key" || die "ssh-keygen failed"
cp "$PREFIX/etc/client_key.pub" "$PREFIX/etc/authorized_keys"
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$PREFIX/etc/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $PREFIX/etc/host_key
PidFile $PREFIX/sshd.pid
AuthorizedKeysFile $PREFIX/etc/authorized_keys
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
MaxSessions 64
LogLevel INFO
EOF
"$PREFIX/bin/sshd" -t -f "$PREFIX/etc/sshd_config" || die "sshd rejects its config"
"$PREFIX/bin/sshd" -D -e -f "$PREFIX/etc/sshd_config" > "$PREFIX/sshd.log" 2>&1 &
SSHD_PID=$!
trap 'kill $SSHD_PID 2>/dev/null' EXIT
"$PYTHON" - "$PORT" <<'EOF' || die "sshd did not answer on its port: $(tail -5 "$PREFIX/sshd.log")"
import socket, sys, time
deadline = time.monotonic() + 15
while time.monotonic() < deadline:
    try:
        with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1) as s:
            if s.recv(64).startswith(b"SSH-2.0"):
                sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$PREFIX/etc/host_key.pub")" > "$PREFIX/etc/known_hosts"
cat > "$PREFIX/etc/ssh_config" <<EOF
Host $ALIAS
  HostName 127.0.0.1
  Port $PORT
  User $(id -un)
  IdentityFile $PREFIX/etc/client_key
  IdentitiesOnly yes
  UserKnownHostsFile $PREFIX/etc/known_hosts
EOF
ssh -F "$PREFIX/etc/ssh_config" -o BatchMode=yes "$ALIAS" true 2>"$PREFIX/ssh-check.log" \
  && row "sshd on 127.0.0.1:$PORT (key only)" ok "ssh $ALIAS true: logged in" \
  || row "sshd on 127.0.0.1:$PORT (key only)" FAILED "ssh $ALIAS: $(tail -2 "$PREFIX/ssh-check.log")"

# ------------------------------------------------------------------ 4. the project, and the host entry
# a copy of the tree to deploy from (the second deploy edits one of its files)
PROJECT=$PREFIX/project
mkdir -p "$PROJECT"
if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
  COMMIT=$(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo "+changes")
  git -C "$REPO" ls-files -z --cached --others --exclude-standard | (cd "$REPO" && xargs -0 cp -a --parents -t "$PROJECT")
else
  COMMIT=${KDTREE_COMMIT:-unknown}
  tar -C "$REPO" --exclude='./.deploy-deps*' --exclude=./build --exclude='./build-*' --exclude=./shared \
      --exclude=./.venv --exclude=./results --exclude='*/__pycache__' -cf - . | tar -C "$PROJECT" -xf -
fi
[ -f "$PROJECT/kdtree.toml" ] || die "the project copy has no kdtree.toml"
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || die "no nvcc on PATH or in /usr/local/cuda"
CUDA_HOME_FOUND=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
if [ $GPU = 1 ]; then
  SMI=$(command -v nvidia-smi) || die "no nvidia-smi: run with --no-gpu on a machine without GPUs"
  NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  GPU_LINES="nvidia_smi = \"$SMI\"
gpus = $NGPU"  # arch unset: kdtree build there detects the GPUs (sm_90a on an H200)
  RUN_ARGS=(--device cuda --max-tokens 256)
  EDITED=csrc/kernels/tree_accept.cu
else
  # no GPU: one small program for sm_120, a pytest file as the test step
  GPU_LINES='gpus = 0
arch = [120]
build = ["{python}", "-m", "kdtree_cli", "build", "test_kdtr", "--arch", "{arch}"]
test = ["{python}", "-m", "kdtree_cli", "test", "--", "tests/foundation/test_kdtr.py", "-q", "-p", "no:cacheprovider"]'
  RUN_ARGS=(--device cpu --max-tokens 48)
  EDITED=csrc/common/kdtr.cpp
fi
ENV_LINE=""
[ -n "${LD_LIBRARY_PATH:-}" ] && ENV_LINE="env = { LD_LIBRARY_PATH = \"$LD_LIBRARY_PATH\" }"  # ssh sessions start without it
export XDG_CONFIG_HOME=$PREFIX/config XDG_STATE_HOME=$PREFIX/state
cat > "$XDG_CONFIG_HOME/kdtree/hosts.toml" <<EOF
# written by scripts/gpu_deploy_selftest.sh: this machine, reached over its own loopback sshd
[hosts.$HOST]
ssh = "$ALIAS"
ssh_config = "$PREFIX/etc/ssh_config"
dir = "$PREFIX/remote"
python = "$PYTHON"
cuda_home = "$CUDA_HOME_FOUND"
# each release gets its own venv made from \$PYTHON (whose packages it sees); nothing to
# install: the image has the requirements, and a pip resolve of its whole torch stack
# against carried wheels is not what this run is for (tests/remote covers --wheels)
requirements = []
keep = 3
connect_timeout = 20
$GPU_LINES
$ENV_LINE
EOF
kd() { (cd "$PROJECT" && COLUMNS=160 "$PYTHON" -m kdtree_cli "$@"); }

# ------------------------------------------------------------------ 5. kdtree hosts
kd hosts "$HOST" > "$OUT/hosts.txt" 2>&1; rc=$?
kd hosts "$HOST" --json > "$PREFIX/collect/hosts.json" 2>&1
[ $rc = 0 ] && row "kdtree hosts $HOST" ok "$(grep -o '"arch": "[^"]*"' "$PREFIX/collect/hosts.json"), $(grep -o '"gpus": "[^"]*"' "$PREFIX/collect/hosts.json")" \
            || row "kdtree hosts $HOST" FAILED "exit $rc; see hosts.txt"

# ------------------------------------------------------------------ 6. two deploys
deploy() {  # deploy N: run it, keep its log and results, describe it in a row
  local n=$1 label=$2 t0 t1 rc json
  t0=$(now)
  kd deploy "$HOST" --results "$PREFIX/results" > "$OUT/deploy$n.log" 2>&1; rc=$?
  t1=$(now)
  json=$PREFIX/results/$HOST/deploy.json
  if [ $rc = 0 ] && [ -f "$json" ]; then
    cp -a "$PREFIX/results/$HOST" "$PREFIX/collect/deploy$n"
    local built facts
    facts=$("$PYTHON" - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
steps = ", ".join("%s %.1f s" % (s["name"], s["seconds"]) for s in r["steps"])
print("%d file(s) uploaded (%.2f MB), %d reused; steps: %s" % (r["uploaded"], r["upload_bytes"] / 1e6, r["reused"], steps))
PY
)
    built=$(grep -E '^built [0-9]+ step|up to date' "$PREFIX/results/$HOST/logs/build.log" | tail -1)
    local verdict=ok
    # the second deploy changed one file: exactly that one must travel
    [ "$n" = 2 ] && ! grep -q '"uploaded": 1,' "$json" && verdict=FAILED
    row "deploy $n ($label)" $verdict "wall $(secs "$t0" "$t1") s; $facts; build: ${built:-?}"
  else
    row "deploy $n ($label)" FAILED "exit $rc after $(secs "$t0" "$t1") s; see deploy$n.log"
  fi
}
deploy 1 "first"
printf '\n// edited by scripts/gpu_deploy_selftest.sh to measure an incremental deploy\n' >> "$PROJECT/$EDITED"
deploy 2 "after editing $EDITED"
if [ -f "$PREFIX/collect/deploy2/logs/build.log" ]; then
  grep -E '^\[[0-9]+/[0-9]+\]' "$PREFIX/collect/deploy2/logs/build.log" > "$PREFIX/collect/deploy2-build-steps.txt"
fi
tests=$(grep -hE '^native: [0-9]+ passed|[0-9]+ passed' "$PREFIX/collect/deploy2/logs/test.log" 2>/dev/null | tail -1)
skips=$(grep -hi 'skip' "$PREFIX/collect/deploy2/logs/test.log" 2>/dev/null | grep -v -e '│' -e '┃' -e '^native:' -e ' passed' | head -5 | tr '\n' ' ')
[ -n "$tests" ] && rows+=("| tests on the host (deploy 2) | - | $tests${skips:+; skip lines: $skips} |")
grep -h "engine check" "$OUT"/deploy*.log | tail -1 | sed 's/^/engine check: /' > "$PREFIX/collect/engine-check.txt"

# ------------------------------------------------------------------ 7. kdtree tui --host, live
t0=$(now)
(cd "$PROJECT" && "$PYTHON" -m tools.tui_capture --host "$HOST" --out "$PREFIX/collect/tui" --size 120x40 \
   --at-rounds 8 --timeout 240 -- --model refs/models/demo-target --drafter refs/models/demo-drafter \
   --prompt 'def fibonacci(n):' "${RUN_ARGS[@]}") > "$OUT/tui.log" 2>&1; rc=$?
svgs=($(ls "$PREFIX/collect/tui/"*.svg 2>/dev/null | sort))
[ ${#svgs[@]} -ge 1 ] && cp "${svgs[0]}" "$OUT/tui-midrun.svg"
[ ${#svgs[@]} -ge 2 ] && cp "${svgs[-1]}" "$OUT/tui-end.svg"
[ $rc = 0 ] && row "kdtree tui --host $HOST" ok "$(secs "$t0" "$(now)") s; $(tail -2 "$OUT/tui.log" | head -1)" \
            || row "kdtree tui --host $HOST" FAILED "exit $rc; see tui.log"

# ------------------------------------------------------------------ 8. summary and files
cp "$PREFIX/sshd.log" "$XDG_CONFIG_HOME/kdtree/hosts.toml" "$PREFIX/collect/" 2>/dev/null
[ -d "$XDG_STATE_HOME/kdtree/deploy" ] && cp -a "$XDG_STATE_HOME/kdtree/deploy" "$PREFIX/collect/failed-deploys"
{
  echo "# kdtree deploy to this machine over its loopback sshd"
  echo
  echo "- command: \`OUT=... scripts/gpu_deploy_selftest.sh $([ $GPU = 0 ] && echo --no-gpu)\`"
  echo "- commit: $COMMIT"
  echo "- date: $(date -u +%FT%TZ)"
  echo "- machine: $(uname -m), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(nproc) cores"
  echo "- device: $( [ $GPU = 1 ] && nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | tr '\n' ';' || echo 'no GPU (--no-gpu)')"
  echo "- python: $("$PYTHON" --version 2>&1) at $PYTHON; nvcc: $("$NVCC" --version | grep -o 'release [0-9.]*')"
  echo "- edited for deploy 2: $EDITED"
  echo
  echo "| step | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  cat "$PREFIX/collect/engine-check.txt" 2>/dev/null
  if [ -s "$PREFIX/collect/deploy2-build-steps.txt" ]; then
    echo; echo "build steps of deploy 2:"; sed 's/^/    /' "$PREFIX/collect/deploy2-build-steps.txt"
  fi
} | tee -a "$OUT/summary.md"
tar -C "$PREFIX/collect" -czf "$OUT/selftest-files.tgz" . 2>/dev/null
echo "files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $status
