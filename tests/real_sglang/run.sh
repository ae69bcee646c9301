#!/usr/bin/env bash
# The real-SGLang tier: tiny scenarios replayed on SGLang's real HiCache on CPU and on the
# simulator, compared field by field (tests/real_sglang/__main__.py). Installs its own venv in
# .cache/real-sglang-venv and each release's wheel in .cache/real-sglang/RELEASE (both ignored by
# git, reused while their stamps match what they were built from: tests/real_sglang/install.py).
# Arguments go to the driver (--releases, -k, -v, --write-docs); a selection of no case exits 2
# before anything is installed. Where the CPU build of torch 2.13.0 is not on this machine's disk
# it says the tier was SKIPPED and exits 0, or 1 under CI (which must run it).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/real_sglang
venv=.cache/real-sglang-venv
install=(python3 -m tests.real_sglang.install)
releases=$("${install[@]}" releases "$@")
cases=$(python3 -c "from tests.real_sglang.cases import CASES; print(len(CASES))")
python3 -m venv "$venv"
pip=("$venv/bin/pip" install -q --disable-pip-version-check -c "$here/constraints.txt")
torch=$(grep -m1 '^torch==' "$here/constraints.txt")
if ! "${pip[@]}" --dry-run --no-index --no-deps "$torch" >/dev/null 2>&1; then
  echo "0 passed, 0 failed, $cases skipped"
  echo "=== the real-SGLang tier was SKIPPED: the CPU build of $torch is not on this machine's" \
    "disk, so none of its $cases replays on SGLang's real cache ran ==="
  if [ -n "${CI:-}" ]; then
    echo "error: CI must run the real-SGLang tier (put the CPU build of $torch on its disk)" >&2
    exit 1
  fi
  exit 0
fi
stamp="$venv/.installed"
if [ "$("${install[@]}" venv "$stamp")" = stale ]; then
  python3 -m venv --clear "$venv"
  "${pip[@]}" -r "$here/requirements.txt"
  "${pip[@]}" --no-deps -r "$here/no_deps.txt"
  "${pip[@]}" -e .
  "${install[@]}" venv "$stamp" --write >/dev/null
fi
for release in $releases; do
  target=".cache/real-sglang/$release"
  wheel=$(python3 -c "from tests.conformance.releases import _wheel; print(_wheel('$release'))")
  if [ "$("${install[@]}" release "$release" "$wheel" "$target/.installed")" = stale ]; then
    rm -rf "$target"
    "${pip[@]}" --no-deps --target "$target" "$wheel"
    for pin in $("${install[@]}" pins "$release"); do
      "${pip[@]}" --no-deps --target "$target" "$pin"
    done
    "${install[@]}" release "$release" "$wheel" "$target/.installed" --write >/dev/null
  fi
done
exec "$venv/bin/python" -m tests.real_sglang "$@" --releases "${releases// /,}"
