#!/usr/bin/env bash
# Prepare the first GPU run on an ordinary machine (no GPU needed): fill ./shared inside the
# checkout (git-ignored; the device tool sends a checkout's shared/ along, and the printed command
# names it in `carry` too) with what the GPU machine lacks, then print the one command to run there.
#
#   bash bench/gpu_prep.sh [DEST]        # DEST: default <checkout>/shared
#
# It copies coco128 and the parity references (found as bench/_shared.py finds them:
# CORNERNET_DATA, ../shared), downloads cp312 manylinux wheels of the COCO evaluators
# (faster-coco-eval, pycocotools; the GPU machine's Python is 3.12 with no network), and checks
# that everything that travels stays under the device tool's 64 MiB. Without network the wheels
# are left out and said so: the test.py rows then say "not scored: no evaluator".
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/shared}
limit=$((64 * 1024 * 1024))
py=${PYTHON:-python3}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

found() {  # coco128 or reference folder as the tests find it, never DEST itself
    PYTHONPATH="$repo" "$py" -c "
import sys
from bench import _shared
path = _shared.coco128_dir() if sys.argv[1] == 'coco128' else _shared.reference_dir()
print(path.resolve() if path else '')" "$1"
}

coco128=$(found coco128)
case "$coco128" in
    "") echo "error: coco128 not found (set CORNERNET_DATA to a folder holding data/coco128," \
             "or put shared/ beside the checkout)" >&2; exit 2 ;;
    "$dest"/*) echo "coco128: already in $dest" ;;
    *) rm -rf "$dest/data/coco128"; mkdir -p "$dest/data"
       cp -r "$coco128" "$dest/data/coco128"
       echo "coco128: copied from $coco128" ;;
esac
reference=$(found reference)
case "$reference" in
    ""|"$dest"/*) ;;
    *) rm -rf "$dest/reference"; cp -r "$reference" "$dest/reference"
       echo "parity references: copied from $reference" ;;
esac

# One version of each evaluator: the one installed here, else the one this was checked with.
version() {
    "$py" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p' | grep . || echo "$2"
}
wheels="$dest/wheels"
rm -rf "$wheels"; mkdir -p "$wheels"
if "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$wheels" \
        "faster-coco-eval==$(version faster-coco-eval 1.8.0)" \
        "pycocotools==$(version pycocotools 2.0.11)" 2>"$wheels/pip.err"; then
    rm -f "$wheels/pip.err"
    echo "wheels: $(cd "$wheels" && ls ./*.whl | xargs -n1 basename | tr '\n' ' ')"
else
    echo "wheels: not downloaded ($(tail -1 "$wheels/pip.err")): test.py rows will say" \
         "'not scored: no evaluator'"
    rm -rf "$wheels"
fi

# What travels: the checkout's tracked and untracked-not-ignored files, and DEST.
tree=$(cd "$repo" && git ls-files -z --cached --others --exclude-standard 2>/dev/null \
       | (grep -zv '^shared/' || true) | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
carried=$(du -sb "$dest" | cut -f1)
total=$((${tree:-0} + carried))
echo "size: $((carried / 1024 / 1024)) MiB in $dest, $((total / 1024 / 1024)) MiB with the" \
     "checkout (limit 64 MiB)"
if [ "$total" -ge "$limit" ]; then
    echo "error: $total bytes would travel, over the device tool's 64 MiB" >&2
    exit 1
fi

case "$dest" in
    "$repo"/*) rel=${dest#"$repo"/} ;;
    *) echo "note: $dest is outside the checkout and will not travel; the command below" \
            "assumes <checkout>/shared" ; rel=shared ;;
esac
if [ "$rel" != shared ]; then data=" --data $rel"; else data=""; fi
(cd "$repo" && git check-ignore -q "$rel/") 2>/dev/null \
    || echo "note: $rel/ is not git-ignored: add it to .git/info/exclude"
install="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir"
install="$install --target /tmp/site $rel/wheels/*.whl && export PYTHONPATH=/tmp/site"
install="$install || echo 'evaluator wheels not installed: test.py rows not scored';"
cat <<EOF

The device command (one call; the machine's start counts against the 15 minutes):
  run(timeout_s=420, carry=["$rel"],
      command="$install PYTHONUNBUFFERED=1 python3 bench/gpu_check.py$data --budget 360 --log \$OUT/gpu_check.log")
Then, while the machine is still warm (30 s), the log's last line ("the rest: ...") with
--budget 200 and timeout_s=240, carry and the install prefix as above. Paste the table into
bench/README.md with the GPU model.
EOF
