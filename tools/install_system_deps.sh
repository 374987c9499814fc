#!/usr/bin/env bash
# Installs the Debian packages the tests use when they are missing: bubblewrap (the grader's
# sandbox), libcap2-bin's capsh (Docker's capabilities in the simulated Gradescope container),
# chromium (the site test), and iverilog and verilator (GA-2's circuit, ga2/rtl).
# Needs root; otherwise says what is missing and goes on (the grader then falls back to a plain
# subprocess and says so in its results; the circuit's tests fail and name the missing simulator).
set -u
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v capsh >/dev/null 2>&1 || [ -x /usr/sbin/capsh ] || [ -x /sbin/capsh ] || missing+=(libcap2-bin)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v iverilog >/dev/null 2>&1 || missing+=(iverilog)
command -v verilator >/dev/null 2>&1 || missing+=(verilator)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]} (not root: install them with apt-get to run every test)" >&2
  exit 0
fi
echo "installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" fonts-dejavu-core >/dev/null
