#!/bin/sh
# Compiler launcher of the thread-safety check (CMakeLists.txt, asyncps_thread_safety): runs
# the compile line it is given ("ccache clang++ ... -fsyntax-only -o X.o -c F.cc"), which parses
# and checks F.cc but writes no object, then leaves an empty X.o so that Ninja sees the step
# done and does not run it again until F.cc or a header it reads changes.
obj=
prev=
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then obj=$arg; fi
  prev=$arg
done
"$@" || exit
if [ -n "$obj" ]; then : > "$obj"; fi
