#!/usr/bin/env bash
# System programs some tests use (installed once, when missing and when we may): Debian's
# chromium + chromedriver (report and dashboard screenshots), postgresql (MLflow on a database),
# slurm-wlm and munge (a one-node SLURM controller for the sbatch tests, tests/slurm_support.py).
set -u
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing system packages for tests: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    (apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}") >/tmp/cemlab-apt.log 2>&1 \
      || { echo "apt-get failed (see /tmp/cemlab-apt.log); tests that need ${need[*]} will fail"; }
  else
    echo "note: ${need[*]} missing and not installable here (not root or no apt-get)"
  fi
fi
exit 0
