package runnerload

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/runner"
	"github.com/berthdev/berth/qualification"
)

// launch is one line the host writes to the simulated runners' stdin: a
// runner to start for lease with ticket, dialing endpoint.
type launch struct {
	Endpoint string `json:"endpoint"`
	Lease    string `json:"lease"`
	Ticket   string `json:"ticket"`
}

// simLine is one line the simulated runners' process writes to its
// stdout: a finished task (Task set), or the process's summary at its end
// (Summary set).
type simLine struct {
	Task    string `json:"task,omitempty"`
	Lease   string `json:"lease,omitempty"`
	Offered int64  `json:"offered,omitempty"`
	// Dispatch is how long the command took from the host's Run (the
	// time in its argv) to the simulated task's start in the runner.
	Dispatch time.Duration `json:"dispatch,omitempty"`
	Summary  *simSummary   `json:"summary,omitempty"`
}

type simSummary struct {
	Runners int           `json:"runners"`
	Failed  int           `json:"failed"`
	CPU     time.Duration `json:"cpu"`
	MaxRSS  int64         `json:"maxRSS"`
	Errors  []string      `json:"errors,omitempty"`
}

// SimMain is the simulated runners' process (internal/cmd/runnersim): it
// reads launch lines from stdin and runs one internal/runner.Runner per
// line (its state directory under stateRoot, its tasks simulated by
// simulate), until stdin ends; then it stops every runner, writes its
// summary and returns. Each finished task is a line on stdout.
func SimMain(ctx context.Context, stdin io.Reader, stdout io.Writer, stateRoot string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	sum, err := fileDigest(exe)
	if err != nil {
		return err
	}
	platform := qualification.Platform{OS: "linux", Arch: runtime.GOARCH}.Normalize()
	var outMu sync.Mutex
	enc := json.NewEncoder(stdout)
	emit := func(l simLine) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(l)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var summary simSummary
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l launch
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("runnersim: launch line: %w", err)
		}
		dir := filepath.Join(stateRoot, l.Lease)
		r, err := runner.New(l.Endpoint, dir, &runner.Options{Lease: l.Lease, Ticket: l.Ticket, BinarySHA256: sum, BaseEnv: []string{},
			Platform: func(context.Context) (qualification.Platform, error) { return platform, nil },
			Logger:   slog.New(slog.DiscardHandler),
			SimulateTask: func(ctx context.Context, ts prp.TaskStart, w io.Writer) int {
				return simulate(ctx, l.Lease, ts, w, emit)
			}})
		mu.Lock()
		summary.Runners++
		mu.Unlock()
		if err != nil {
			mu.Lock()
			summary.Failed++
			summary.Errors = append(summary.Errors, err.Error())
			mu.Unlock()
			continue
		}
		wg.Go(func() {
			if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				mu.Lock()
				summary.Failed++
				if len(summary.Errors) < 10 {
					summary.Errors = append(summary.Errors, l.Lease+": "+err.Error())
				}
				mu.Unlock()
			}
		})
	}
	cancel()
	wg.Wait()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	summary.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	summary.MaxRSS = ru.Maxrss << 10
	emit(simLine{Summary: &summary})
	return sc.Err()
}

// simulate is a simulated task. Its argv is the host's (Run):
//
//	sim hello SENT          returns 0 at once
//	sim stream SENT RATE DUR CHUNK
//	                        writes CHUNK-byte writes of zeros at RATE
//	                        bytes/s for DUR, then returns 0
//
// SENT is the host's clock (Unix ns) when it called Run: the dispatch
// latency is from it to now. A stop (ctx) ends it early.
func simulate(ctx context.Context, lease string, ts prp.TaskStart, w io.Writer, emit func(simLine)) int {
	start := time.Now()
	argv := ts.Argv
	if len(argv) < 3 || argv[0] != "sim" {
		return 2
	}
	sent, _ := strconv.ParseInt(argv[2], 10, 64)
	line := simLine{Task: ts.TaskID, Lease: lease, Dispatch: start.Sub(time.Unix(0, sent))}
	defer func() { emit(line) }()
	switch argv[1] {
	case "hello":
		return 0
	case "stream":
		if len(argv) != 6 {
			return 2
		}
		rate, err1 := strconv.ParseInt(argv[3], 10, 64)
		dur, err2 := time.ParseDuration(argv[4])
		chunk, err3 := strconv.Atoi(argv[5])
		if errors.Join(err1, err2, err3) != nil || rate <= 0 || chunk <= 0 {
			return 2
		}
		buf := make([]byte, chunk)
		every := time.Duration(float64(chunk) / float64(rate) * float64(time.Second))
		tick := time.NewTicker(every)
		defer tick.Stop()
		end := start.Add(dur)
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return -1
			case <-tick.C:
			}
			n, err := w.Write(buf)
			line.Offered += int64(n)
			if err != nil {
				return 1
			}
		}
		return 0
	}
	return 2
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
