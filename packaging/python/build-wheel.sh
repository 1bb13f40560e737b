#!/usr/bin/env bash
# Builds the cudatrace wheel and prints its path on the last line of stdout.
#
#   packaging/python/build-wheel.sh [OUT_DIR]
#
# 1. cargo builds libcudatrace.so (release), and the script stages it in
#    wheel-data/scripts/, which maturin ships as the wheel's
#    cudatrace-<version>.data/scripts/: pip installs it into the
#    environment's bin/, next to the `cudatrace` command.
# 2. Both binaries are checked to need no newer glibc than the wheel's
#    manylinux tag promises (objdump -T).
# 3. maturin builds the `cudatrace` command (crate cudatrace-cli) and the
#    wheel, tagged py3-none-manylinux_2_34_x86_64, into OUT_DIR (default
#    $CARGO_TARGET_DIR/wheels, else target/wheels).
#
# maturin is used from PATH if it is there; else it is installed with pip
# into a virtual environment of its own under the target folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# The newest glibc the wheel may need: manylinux_2_<GLIBC_MINOR>.
GLIBC_MINOR=34
TAG=manylinux_2_$GLIBC_MINOR

target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
out=${1:-$target/wheels}
mkdir -p "$out"
out=$(cd "$out" && pwd)

say() { echo "build-wheel: $*" >&2; }
for tool in cargo objdump python3; do
    command -v "$tool" >/dev/null 2>&1 || { say "$tool is missing (cargo: rustup; objdump: binutils)"; exit 2; }
done

say "building libcudatrace.so"
(cd "$root" && cargo build --release --locked -p cudatrace >&2)
library=$target/release/libcudatrace.so

# Newest GLIBC_x.y symbol version a binary needs, as "x.y".
glibc_needed() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1
}
fits_tag() {
    local needed
    needed=$(glibc_needed "$1")
    [ -n "$needed" ] || { say "no GLIBC symbol versions in $1"; exit 1; }
    if [ "$(printf '%s\n' "$needed" "2.$GLIBC_MINOR" | sort -V | tail -1)" != "2.$GLIBC_MINOR" ]; then
        say "$1 needs glibc $needed, newer than the wheel's $TAG; build on an older glibc"
        exit 1
    fi
    say "$(basename "$1") needs glibc >= $needed (tag $TAG)"
}
fits_tag "$library"

rm -rf "$here/wheel-data"
mkdir -p "$here/wheel-data/scripts"
install -m 0755 "$library" "$here/wheel-data/scripts/libcudatrace.so"

maturin=$(command -v maturin || true)
if [ -z "$maturin" ]; then
    venv=$target/maturin-venv
    if [ ! -x "$venv/bin/maturin" ]; then
        say "installing maturin into $venv"
        python3 -m venv "$venv" >&2
        "$venv/bin/python" -m pip install -q 'maturin>=1.5,<2' >&2
    fi
    maturin=$venv/bin/maturin
fi

say "building the cudatrace command and the wheel with $("$maturin" --version)"
(cd "$here" && CARGO_TARGET_DIR=$target "$maturin" build --release --locked \
    --compatibility "$TAG" --out "$out" >&2)
wheel=$(ls -t "$out"/cudatrace-*-py3-none-"$TAG"_x86_64.whl 2>/dev/null | head -1 || true)
[ -f "$wheel" ] || { say "maturin wrote no wheel into $out"; exit 1; }
fits_tag "$target/release/cudatrace"

# The wheel must hold both binaries, the library where pip puts scripts.
python3 - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for wanted in ("/scripts/cudatrace", "/scripts/libcudatrace.so"):
    if not any(n.endswith(wanted) and ".data/" in n for n in names):
        sys.exit(f"build-wheel: {sys.argv[1]} lacks *.data{wanted}: {names}")
EOF
echo "$wheel"
