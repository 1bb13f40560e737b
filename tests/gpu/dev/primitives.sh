#!/usr/bin/env bash
# What the pieces of a record cost on this machine: the clocks, a
# global-dynamic TLS access (how a preloaded library reaches its thread
# locals), an atomic add, and a 72-byte record stored into a shared file
# mapping with the cache polluted in between. Also the clock source and the
# TSC's flags, which decide whether a record may be stamped from the TSC.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d)
gcc -O2 -fPIC -shared -ftls-model=global-dynamic -o "$build/libprimitives_tls.so" "$here/primitives_tls.c"
gcc -O2 -o "$build/primitives" "$here/primitives.c" -L"$build" -lprimitives_tls -Wl,-rpath,"$build"
echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
echo "available $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource)"
echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "flags $(grep -m1 "^flags" /proc/cpuinfo | grep -o -w -E "constant_tsc|nonstop_tsc|hypervisor|tsc_known_freq|rdtscp" | tr "\n" " ")"
taskset -c "${CORE:-2}" "$build/primitives"
