"""The progress bar of long commands, on stderr: done/total, rate and ETA."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress", "progress_enabled", "rate_text"]


class Progress:
    """A progress bar on stderr: done/total, rate and ETA.

    On a terminal the bar is redrawn in place (at most ten times a second); otherwise (``--progress`` with stderr
    redirected) one line is written at most every two seconds, and at the end.
    """

    def __init__(self, total, label, *, unit="vectors", enabled=True, stream=None):
        self.total = total
        self.label = label
        self.unit = unit
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and _isatty(self.stream)
        self.done = 0
        self.start = time.perf_counter()
        self._last = -1e9
        self._drawn = False
        if enabled:
            self._draw(force=True)

    def update(self, n):
        self.done += n
        if self.enabled:
            self._draw()

    def close(self):
        """Draw the final state and end the line."""
        if self.enabled:
            self._draw(force=True)
            if self.tty and self._drawn:
                self.stream.write("\n")
                self.stream.flush()
            self.enabled = False

    def abort(self):
        """Stop after an error: on a terminal the bar is erased, so the error message stands alone."""
        if self.enabled:
            if self.tty and self._drawn:
                self.stream.write("\r\033[K")
                self.stream.flush()
            self.enabled = False

    def _draw(self, force=False):
        now = time.perf_counter()
        if not force and now - self._last < (0.1 if self.tty else 2.0):
            return
        self._last = now
        elapsed = now - self.start
        rate = self.done / elapsed if elapsed > 0 and self.done else 0.0
        if self.total:
            frac = min(1.0, self.done / self.total)
            width = 24
            filled = int(round(frac * width))
            bar = "[" + "=" * filled + " " * (width - filled) + "]"
            eta = (self.total - self.done) / rate if rate > 0 else None
            text = (f"{self.label} {bar} {100 * frac:5.1f}%  {self.done:,}/{self.total:,} {self.unit}  "
                    f"{rate_text(rate)} {self.unit}/s  "
                    + (f"ETA {_clock(eta)}" if self.done < self.total else f"{_clock(elapsed)}"))
        else:
            text = f"{self.label} {self.done:,} {self.unit}  {rate_text(rate)} {self.unit}/s  {_clock(elapsed)}"
        if self.tty:
            self.stream.write("\r" + text + "\033[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn = True


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def rate_text(r):
    return f"{r:,.0f}" if r >= 100 else f"{r:.1f}"


def _clock(seconds):
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:d}:{s:02d}"


def progress_enabled(args):
    if getattr(args, "quiet", False):
        return False
    return bool(getattr(args, "progress", False)) or _isatty(sys.stderr)

