#!/usr/bin/env bash
# Stage nvFuser's user-level Python tests and the measurement harness into .nvf/ (ignored
# by git), for scripts/nvf_compat_gpu.sh on a machine without an nvFuser checkout:
#
#   bash scripts/nvf_compat_stage.sh [FUSER_GIT_DIR] [HARNESS_DIR]
#
# FUSER_GIT_DIR (default /work/.mirror/NVIDIA+Fuser/repo): a git directory of NVIDIA/Fuser;
# its tests/python/direct/*.py and tests/python/opinfo/* at HEAD are copied to
# .nvf/tests/python/{direct,opinfo}/.  HARNESS_DIR (default ../shared/nvf_compat, else
# /work/shared/nvf_compat) is copied to .nvf/harness/.  The copies stay out of the
# project (nvFuser's tests are under its licence): .nvf/ is in .gitignore.
set -eu
fuser=${1:-/work/.mirror/NVIDIA+Fuser/repo}
harness=${2:-}
if [ -z "$harness" ]; then
  harness=../shared/nvf_compat; [ -d "$harness" ] || harness=/work/shared/nvf_compat
fi
rm -rf .nvf
mkdir -p .nvf/tests/python/direct .nvf/tests/python/opinfo .nvf/harness
for dir in direct opinfo; do
  for f in $(git -C "$fuser" ls-tree --name-only HEAD "tests/python/$dir/"); do
    case "$dir/$f" in direct/*.py|opinfo/*) git -C "$fuser" show "HEAD:$f" > ".nvf/$f" ;; esac
  done
done
cp -r "$harness"/. .nvf/harness/
chmod -R u+w .nvf
echo "staged $(ls .nvf/tests/python/direct | wc -l) direct and $(ls .nvf/tests/python/opinfo | wc -l) opinfo files, harness from $harness"
