#!/bin/sh
# compile.sh CACHE NAME OUT: a compile that needs one implicit module from the module cache
# CACHE: it loads CACHE/H1/Foundation-1QX.pcm when it is there, else builds it (written to a
# temporary name and renamed into place, as clang does), and writes to OUT which it did.
set -eu
cache="$1" name="$2" out="$3"
pcm="$cache/H1/Foundation-1QX.pcm"
mkdir -p "$cache/H1"
if [ -f "$pcm" ]; then
  echo "$name loaded the module $(cat "$pcm")" >"$out"
else
  echo "built by $name" >"$pcm.tmp.$$"
  mv "$pcm.tmp.$$" "$pcm"
  echo "$name built the module" >"$out"
fi
