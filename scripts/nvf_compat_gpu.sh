#!/usr/bin/env bash
# nvFuser's own tests against pyfuser, from the copies in .nvf/ (scripts/nvf_compat_stage.sh),
# on a machine with no nvFuser checkout (the lent GPU machine):
#
#   bash scripts/nvf_compat_gpu.sh [pytest args...]        # from the project's root
#
# .nvf/tests/python/direct/*.py, .nvf/tests/python/opinfo/* and .nvf/harness/ (a copy of
# ../shared/nvf_compat) are turned into a one-commit git repository in a temporary
# folder, because the harness's run.sh reads the tests with `git show HEAD:...` (where
# git is missing, or NVF_NO_GIT=1, a stand-in answering those two commands is put on PATH).  Then run.sh
# runs in MODE (default gpu) with -n N (default 8; pytest-xdist), with PY (default
# python3) and PYTHONPATH=src.  Its summary goes to stdout and to .nvf/summary_$MODE.txt,
# the pytest log to $WORK/log.txt (default /tmp/nvf_compat_$MODE).  JAX (imported by the
# op sweep) would take 75% of the GPU's memory per worker: XLA_PYTHON_CLIENT_PREALLOCATE=false.
set -u
MODE=${MODE:-gpu}; N=${N:-8}
export PY=${PY:-python3} WORK=${WORK:-/tmp/nvf_compat_$MODE} XLA_PYTHON_CLIENT_PREALLOCATE=false
for need in .nvf/tests/python/direct .nvf/tests/python/opinfo .nvf/harness/run.sh; do
  [ -e "$need" ] || { echo "missing $need: stage it first (scripts/nvf_compat_stage.sh)" >&2; exit 2; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/fuser" && cp -r .nvf/tests "$tmp/fuser/"
if [ -z "${NVF_NO_GIT:-}" ] && command -v git > /dev/null; then
  git -C "$tmp/fuser" init -q && git -C "$tmp/fuser" add -A &&
    git -C "$tmp/fuser" -c user.name=nvf -c user.email=nvf@localhost commit -qm "nvFuser tests" || exit 2
else
  # run.sh calls only `git -C DIR show HEAD:PATH` and `git -C DIR ls-tree --name-only HEAD DIR/`
  mkdir -p "$tmp/bin"
  cat > "$tmp/bin/git" <<'SHIM'
#!/usr/bin/env bash
[ "$1" = -C ] || exit 2
root=$2; shift 2
case "$1" in
  show) cat "$root/${2#HEAD:}" ;;
  ls-tree) for f in "$root/${!#}"*; do echo "${f#$root/}"; done ;;
  *) exit 2 ;;
esac
SHIM
  chmod +x "$tmp/bin/git"; export PATH="$tmp/bin:$PATH"
fi
# -vv: one line per test as it ends ("[gwN] [ P%] PASSED/FAILED id"), so a run stopped by the
# device's time limit still says which tests failed (summary.py reads only the -rfE lines).
bash .nvf/harness/run.sh "$tmp/fuser" "$MODE" -n "$N" -vv "$@" | tee ".nvf/summary_$MODE.txt"
