#!/usr/bin/env bash
# The real-SGLang tier: tiny scenarios replayed on SGLang's real HiCache on CPU and on the
# simulator, compared field by field (tests/real_sglang/__main__.py). Installs its own venv in
# .cache/real-sglang-venv and each release's wheel in .cache/real-sglang/RELEASE (both ignored by
# git, reused when present). Where the CPU build of torch 2.13.0 is not on this machine's disk it
# says so and reports every case skipped. Arguments go to the driver (--releases, -k, -v,
# --write-docs).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/real_sglang
venv=.cache/real-sglang-venv
releases="0.5.23 0.5.19"
cases=$(python3 -c "from tests.real_sglang.cases import CASES; print(len(CASES))")
python3 -m venv "$venv"
pip=("$venv/bin/pip" install -q --disable-pip-version-check -c "$here/constraints.txt")
if ! "${pip[@]}" --dry-run --no-index --no-deps torch==2.13.0 >/dev/null 2>&1; then
  echo "real SGLang tier skipped: the CPU build of torch 2.13.0 is not on this machine's disk"
  echo "0 passed, 0 failed, $cases skipped"
  exit 0
fi
stamp="$venv/.installed"
if [ ! -f "$stamp" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
  "${pip[@]}" -r "$here/requirements.txt"
  "${pip[@]}" --no-deps triton==3.9.0
  "${pip[@]}" -e .
  cp "$here/requirements.txt" "$stamp"
fi
for release in $releases; do
  target=".cache/real-sglang/$release"
  if [ ! -f "$target/.installed" ]; then
    wheel=$(python3 -c "from tests.conformance.releases import _wheel; print(_wheel('$release'))")
    rm -rf "$target"
    "${pip[@]}" --no-deps --target "$target" "$wheel"
    # 0.5.19's server arguments import xgrammar at top level (its pinned release)
    if [ "$release" = "0.5.19" ]; then "${pip[@]}" --no-deps --target "$target" xgrammar==0.2.1; fi
    touch "$target/.installed"
  fi
done
exec "$venv/bin/python" -m tests.real_sglang --releases "${releases// /,}" "$@"
