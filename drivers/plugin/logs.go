package plugin

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

// Options configure how a host runs its plugins. The zero Options (or
// nil) discards what the plugins write to their stderr.
type Options struct {
	// Logger receives each line a plugin writes to its stderr, at level
	// info, with the attributes plugin (the binary) and line; at most
	// maxLogLine bytes of a line and maxLogLines lines per process start
	// are logged, then one warning that the rest is dropped. Default nil:
	// discarded.
	Logger *slog.Logger
}

// Bounds of what a plugin's stderr puts in the host's log: 1 KiB a line,
// 1000 lines per process.
const (
	maxLogLine  = 1 << 10
	maxLogLines = 1000
)

// stderrLog writes a plugin's stderr to a logger, line by line, bounded.
type stderrLog struct {
	log    *slog.Logger
	binary string

	mu      sync.Mutex
	partial []byte // the current line so far, at most maxLogLine bytes
	cut     bool   // the current line is longer than partial
	lines   int
}

func newStderrLog(log *slog.Logger, binary string) *stderrLog {
	return &stderrLog{log: log, binary: binary}
}

// Write logs each complete line of p; it never fails.
func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := maxLogLine - len(l.partial); room < len(chunk) {
			l.partial, l.cut = append(l.partial, chunk[:max(room, 0)]...), true
		} else {
			l.partial = append(l.partial, chunk...)
		}
		if i < 0 {
			break
		}
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

// emit logs the current line, or drops it past maxLogLines.
func (l *stderrLog) emit() {
	line, cut := string(l.partial), l.cut
	l.partial, l.cut = l.partial[:0], false
	l.lines++
	switch {
	case l.lines <= maxLogLines:
		attrs := []slog.Attr{slog.String("plugin", l.binary), slog.String("line", line)}
		if cut {
			attrs = append(attrs, slog.Bool("truncated", true))
		}
		l.log.LogAttrs(context.Background(), slog.LevelInfo, "plugin stderr", attrs...)
	case l.lines == maxLogLines+1:
		l.log.LogAttrs(context.Background(), slog.LevelWarn, "plugin stderr: further lines dropped",
			slog.String("plugin", l.binary), slog.Int("limit", maxLogLines))
	}
}
