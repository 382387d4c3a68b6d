#!/usr/bin/env bash
# Build Psyche-C's header-inference tools (psychecgen + psychecsolver-exe) from a source tree of its
# `original` branch, and install them under PREFIX/bin (shared libraries under PREFIX/lib, linked from
# PREFIX/bin where psychecgen's own rpath, `$ORIGIN`, finds them; no LD_LIBRARY_PATH is needed).
#
#   scripts/build_psychec.sh SRC PREFIX
#
# SRC: a Psyche-C source tree (the `original` branch: a clone, or the archive under
#      shared/vendor/psychec/ unpacked), or the .tar.gz archive itself. SRC is never modified: the build
#      runs on a copy.
# PREFIX: install prefix; when PREFIX/bin already holds both tools and they run, nothing is rebuilt
#      (set PSYCHEC_REBUILD=1 to force).
#
# Debian packages needed: cmake g++ ghc libghc-syb-dev libghc-optparse-applicative-dev. Missing ones are
# installed with apt-get when running as root (PSYCHEC_NO_APT=1 disables that), under a lock so that
# parallel builds do not run apt at the same time.
#
# Two incompatibilities of the 2022 sources with current compilers are fixed at build time, on the copy:
#  - C++ (GCC >= 11 no longer includes some standard headers transitively): <cstddef>, <cstdint>,
#    <limits>, <cstring> are force-included through CMAKE_CXX_FLAGS;
#  - Haskell (GHC >= 8.4 exports Semigroup's <> from the Prelude, ambiguous with HughesPJ's <>): the
#    Prelude's <> is hidden in the three solver modules that use HughesPJ's.
# The solver is built with plain `ghc --make` against the system package database (stack is not usable
# offline and is not needed).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 SRC PREFIX" >&2
    exit 2
fi
SRC=$1
PREFIX=$(mkdir -p "$2" && cd "$2" && pwd)
JOBS=${PSYCHEC_JOBS:-$(nproc)}

have_tools() {
    [ -x "$PREFIX/bin/psychecgen" ] && [ -x "$PREFIX/bin/psychecsolver-exe" ] || return 1
    # both must start (a stale rpath or a missing library shows here)
    "$PREFIX/bin/psychecsolver-exe" --help >/dev/null 2>&1 || return 1
    ldd "$PREFIX/bin/psychecgen" 2>/dev/null | grep -q "not found" && return 1
    return 0
}

if [ "${PSYCHEC_REBUILD:-0}" != 1 ] && have_tools; then
    echo "Psyche-C already built in $PREFIX/bin (PSYCHEC_REBUILD=1 to rebuild)"
    exit 0
fi

# --- build dependencies -------------------------------------------------------------------------------
PKGS="cmake g++ ghc libghc-syb-dev libghc-optparse-applicative-dev"
missing=()
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "${PSYCHEC_NO_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing ${missing[*]}"
        flock /tmp/codegrpo-apt.lock -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${missing[*]}"
    else
        echo "error: missing Debian packages: ${missing[*]} (install them, e.g. apt-get install ${missing[*]})" >&2
        exit 1
    fi
fi

# --- copy of the sources --------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psychec-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ -f "$SRC" ]; then
    tar xzf "$SRC" -C "$WORK"
    top=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d | head -n1)
    [ -n "$top" ] || { echo "error: $SRC: archive holds no directory" >&2; exit 1; }
    mv "$top" "$WORK/src"
elif [ -d "$SRC" ]; then
    cp -a "$SRC" "$WORK/src"
    rm -rf "$WORK/src/.git"
else
    echo "error: $SRC: no such file or directory" >&2
    exit 1
fi
S="$WORK/src"
for f in CMakeLists.txt solver/app/Main.hs solver/src/Utils/Pretty.hs solver/src/Utils/Writer.hs \
         solver/src/Solver/Unification.hs driver/Plugin.cpp; do
    [ -f "$S/$f" ] || { echo "error: $SRC: $f missing (not a Psyche-C tree of the 'original' branch?)" >&2; exit 1; }
done

# --- Haskell fix: hide the Prelude's <> before the first import of each module ----------------------------
for f in solver/src/Utils/Pretty.hs solver/src/Utils/Writer.hs solver/src/Solver/Unification.hs; do
    if ! grep -q '^import Prelude hiding ((<>))' "$S/$f"; then
        awk 'BEGIN{done=0} /^import /&&!done{print "import Prelude hiding ((<>))"; done=1} {print}' \
            "$S/$f" > "$S/$f.new" && mv "$S/$f.new" "$S/$f"
    fi
done

# --- C++ part: psychecgen, libpsychecfe.so, libpsychecstd.so ----------------------------------------------
# PATH without stack, so the top CMakeLists' `stack install` cannot start a download; it only prints.
mkdir -p "$S/build"
(
    cd "$S/build"
    PATH=$(echo "$PATH" | tr ':' '\n' | while read -r d; do [ -x "$d/stack" ] || echo "$d"; done | paste -sd:) \
    cmake .. -DCMAKE_BUILD_TYPE= \
        -DCMAKE_CXX_FLAGS="-O1 -include cstddef -include cstdint -include limits -include cstring -w" \
        -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON >cmake.log 2>&1 \
        || { tail -n 30 cmake.log >&2; exit 1; }
    make -j"$JOBS" >make.log 2>&1 || { grep -m5 -B2 -A5 'error' make.log >&2; exit 1; }
)

# --- solver: psychecsolver-exe ----------------------------------------------------------------------------
(
    cd "$S/solver"
    ghc --make -O1 -isrc -outputdir "$WORK/ghc-out" -o "$WORK/psychecsolver-exe" app/Main.hs >"$WORK/ghc.log" 2>&1 \
        || { tail -n 30 "$WORK/ghc.log" >&2; exit 1; }
)

# --- install ------------------------------------------------------------------------------------------------
gen=$(find "$S" -name psychecgen -type f -perm -u+x | head -n1)
fe=$(find "$S" -name 'libpsychecfe.so*' -type f | head -n1)
std=$(find "$S" -name 'libpsychecstd.so' -type f | head -n1)
for x in gen fe std; do
    [ -n "${!x}" ] || { echo "error: build produced no $x" >&2; exit 1; }
done
mkdir -p "$PREFIX/bin" "$PREFIX/lib"
install -m 0755 "$fe" "$PREFIX/lib/$(basename "$fe")"
install -m 0755 "$std" "$PREFIX/lib/libpsychecstd.so"
# Psyche-C's CMakeLists fixes the rpath to `$ORIGIN` (the directory of psychecgen): the libraries are
# linked from there.
ln -sfn "../lib/$(basename "$fe")" "$PREFIX/bin/$(basename "$fe")"
ln -sfn ../lib/libpsychecstd.so "$PREFIX/bin/libpsychecstd.so"
install -m 0755 "$gen" "$PREFIX/bin/psychecgen.tmp" && mv -f "$PREFIX/bin/psychecgen.tmp" "$PREFIX/bin/psychecgen"
install -m 0755 "$WORK/psychecsolver-exe" "$PREFIX/bin/psychecsolver-exe.tmp" \
    && mv -f "$PREFIX/bin/psychecsolver-exe.tmp" "$PREFIX/bin/psychecsolver-exe"
rm -rf "$WORK"   # the check below must not find anything through the build tree
have_tools || { echo "error: installed tools do not start (ldd $PREFIX/bin/psychecgen)" >&2; exit 1; }
echo "built $PREFIX/bin/psychecgen and $PREFIX/bin/psychecsolver-exe"
