"""What machine a benchmark ran on (shared by the tools; never imported by the package)."""

import os
import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def core_count() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
