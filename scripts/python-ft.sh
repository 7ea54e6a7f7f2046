#!/usr/bin/env bash
# Build free-threaded CPython 3.13 (./configure --disable-gil) into .python-ft/, from the upstream tarball in
# Debian's source package python3.13 (trixie), fetched with apt-get source through a sources file of our own.
#   scripts/python-ft.sh [PREFIX]   PREFIX defaults to .python-ft; prints the interpreter's path when done
# Idempotent: an interpreter already built there that says its GIL is off is kept. A missing source, compiler or
# header is one line on stderr and exit 2.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="$(realpath -m "${1:-.python-ft}")"
python="$prefix/bin/python3.13t"
# The one version whose tarball the archive serves (newer ones its index lists answered 404).
package=python3.13
version=3.13.5-2+deb13u5
tarball=python3.13_3.13.5.orig.tar.xz
sha256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
# The Debian mirror this system's own apt sources name (the archive labelled Debian, not its security one).
system_mirror() { apt-get indextargets --format '$(LABEL) $(SITE)' 2>/dev/null | awk '$1 == "Debian" {print $2; exit}' || true; }
mirror="${PYTHON_FT_MIRROR:-$(system_mirror)}"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

fail() { echo "error: python-ft: $*" >&2; exit 2; }

if [ -x "$python" ] && "$python" -c 'import sys, ssl; sys.exit(sys._is_gil_enabled())' 2>/dev/null; then
    echo "$python"; exit 0
fi

for tool in cc make xz apt-get; do
    command -v "$tool" >/dev/null 2>&1 || fail "no $tool here (apt-get install gcc make xz-utils)"
done
# ssl for pip, zlib for ensurepip, ffi for ctypes; sqlite3/lzma/bz2 are used by the lab's dependencies.
for pair in zlib.h:zlib1g-dev openssl/ssl.h:libssl-dev ffi.h:libffi-dev lzma.h:liblzma-dev bzlib.h:libbz2-dev \
    sqlite3.h:libsqlite3-dev; do
    header="${pair%%:*}"
    echo "#include <$header>" | cc -E - >/dev/null 2>&1 || fail "no C header $header (apt-get install ${pair#*:})"
done

[ -n "$mirror" ] || fail "no Debian mirror in this system's apt sources (PYTHON_FT_MIRROR=URI names one)"
download="$prefix/download"
mkdir -p "$download"
if [ ! -f "$download/$tarball" ] || ! echo "$sha256  $download/$tarball" | sha256sum --check --status; then
    [ -f "$keyring" ] || fail "no Debian archive keyring at $keyring (apt-get install debian-archive-keyring)"
    apt_dir="$prefix/apt"
    mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial"
    # A sources file of our own: the system's lists are left as they are.
    cat > "$apt_dir/sources/trixie-src.sources" <<EOF
Types: deb-src
URIs: $mirror
Suites: trixie
Components: main
Signed-By: $keyring
EOF
    apt_opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$apt_dir/sources"
        -o "Dir::State::lists=$apt_dir/lists" -o Debug::NoLocking=1)
    apt-get "${apt_opts[@]}" update -qq >"$apt_dir/update.log" 2>&1 \
        || fail "apt-get update of trixie's deb-src at $mirror failed (see $apt_dir/update.log)"
    # apt-get update exits 0 when a mirror cannot be reached: the index it fetched says whether it could.
    compgen -G "$apt_dir/lists/*_trixie_main_source_Sources*" >/dev/null \
        || fail "no trixie deb-src index from $mirror (see $apt_dir/update.log)"
    (cd "$download" && apt-get "${apt_opts[@]}" source --download-only -qq "$package=$version" \
        >"$apt_dir/source.log" 2>&1) \
        || fail "apt-get source $package=$version failed: the archive no longer serves it (see $apt_dir/source.log)"
    echo "$sha256  $download/$tarball" | sha256sum --check --status \
        || fail "$tarball does not have sha256 $sha256"
fi

build="$prefix/build"
rm -rf "$build"
mkdir -p "$build"
tar -xJf "$download/$tarball" -C "$build" --strip-components=1
cd "$build"
echo "building free-threaded CPython $version into $prefix (log: $build/build.log)" >&2
{
    ./configure --disable-gil --disable-test-modules --prefix="$prefix" \
        && make -j"$(nproc)" \
        && make install
} >"$build/build.log" 2>&1 || { tail -20 "$build/build.log" >&2; fail "configure/make failed (see $build/build.log)"; }
"$python" -c 'import sys, ssl; sys.exit(sys._is_gil_enabled())' || fail "$python was built with its GIL on"
cd /
rm -rf "$build"
echo "$python"
