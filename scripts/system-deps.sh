#!/usr/bin/env bash
# Install the system packages the lab needs, only when missing.
#   scripts/system-deps.sh venv PYTHON   check PYTHON is 3.11+ and can create a venv
#   scripts/system-deps.sh build PYTHON  a C compiler and PYTHON's headers, to build uWSGI from its source
#   scripts/system-deps.sh siege chromium postgresql ab ip valgrind
set -euo pipefail

apt_install() {
    local runner=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then runner=(sudo); else
            echo "error: need root or sudo to run: apt-get install -y $*" >&2; exit 2
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: no apt-get here; install these yourself: $*" >&2; exit 2
    fi
    echo "installing system packages: $*" >&2
    "${runner[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${runner[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

case "${1:-}" in
venv)
    python="${2:-python3}"
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "error: $python is not Python 3.11+ (make PYTHON=python3.11 ...)" >&2; exit 2
    fi
    if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
        version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        apt_install "python${version}-venv"
    fi
    ;;
build)
    python="${2:-python3}"
    missing=()
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    headers=$("$python" -c 'import sysconfig; print(sysconfig.get_path("include"))')
    if [ ! -f "$headers/Python.h" ]; then
        version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        missing+=("python${version}-dev")
    fi
    if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
    ;;
*)
    missing=()
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 && continue
        case "$tool" in
            # --no-install-recommends leaves out fonts: screenshots need one.
            chromium) missing+=(chromium fonts-dejavu-core) ;;
            # Its programs live in /usr/lib/postgresql/N/bin; the tests start clusters of their own there.
            postgresql) compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || missing+=(postgresql) ;;
            ab) missing+=(apache2-utils) ;;  # ApacheBench: bench.overhead's load generator
            # ip and tc: the network tests' hosts (tests/test_distributed_network.py, as root).
            ip | tc) missing+=(iproute2) ;;
            # valgrind's callgrind and callgrind_control: bench.overhead's callgrind part.
            valgrind) missing+=(valgrind) ;;
            *) missing+=("$tool") ;;
        esac
    done
    if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
    ;;
esac
