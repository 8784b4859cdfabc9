"""Resident memory of this process from /proc (Linux), for the memory benchmarks."""

from __future__ import annotations


def status_kb(field):
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``, ...), or None."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def status_bytes(*fields):
    """Several ``/proc/self/status`` fields at once, in bytes (one read of the file)."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in fields:
                out[key] = int(rest.split()[0]) * 1024
    return out


def reset_peak():
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return status_kb("VmHWM") is not None
