#!/usr/bin/env bash
# The GPU campaign in one command, on a GPU machine whose Python already has a CUDA torch
# and that reaches no package index (docs/gpu.md):
#   scripts/gpu_campaign.sh OUT [perfmodel campaign options, e.g. --budget-s 540]
# installs this package beside the image's packages, then runs `perfmodel campaign OUT`.
set -uo pipefail
out=${1:?usage: scripts/gpu_campaign.sh OUT [perfmodel campaign options]}
shift
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
start=$(date +%s)
if ! "$python" -m pip install -q --no-deps --no-build-isolation -e . >/tmp/perfmodel-install.log 2>&1; then
    echo "gpu_campaign: pip install --no-deps --no-build-isolation -e . failed:" >&2
    tail -20 /tmp/perfmodel-install.log >&2
    exit 2
fi
echo "gpu_campaign: installed in $(( $(date +%s) - start )) s"
exec "$python" -m perfmodel.cli.main campaign "$out" "$@"
