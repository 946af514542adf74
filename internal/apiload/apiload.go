package apiload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServerPackage is the example server, whose binary is
// Config.ServerBinary; GenPackage the load generator, whose binary is
// Config.GenBinary. The tests and envctl bench build them with
// testenv.SharedBuild.
const (
	ServerPackage = "github.com/berthdev/berth/examples/server"
	GenPackage    = "github.com/berthdev/berth/internal/cmd/apiload"
)

// Config is one run of the harness.
type Config struct {
	// ServerBinary and GenBinary are the built ServerPackage and
	// GenPackage. StoreURL is the server's PostgreSQL database (a
	// postgres:// URL; a path is a SQLite file). Required.
	ServerBinary, GenBinary, StoreURL string
	// Clients loop over the mix (Kinds) for Duration.
	Clients  int
	Duration time.Duration
	// Streams is how many runs write output for the window, StreamRate
	// bytes/s each; each has a follower, and the clients' open_stream
	// requests open them.
	Streams    int
	StreamRate int64
	// Dir holds the server's data directory and its tokens file (default
	// a temporary directory, removed at the end).
	Dir string
}

// The sizes: Full is envctl bench's api-load row, Quick its --quick
// variant, Small the test suite's.
var (
	Full  = Config{Clients: 200, Duration: 60 * time.Second, Streams: 8, StreamRate: 40 << 10}
	Quick = Config{Clients: 20, Duration: 5 * time.Second, Streams: 2, StreamRate: 40 << 10}
	Small = Config{Clients: 4, Duration: 2 * time.Second, Streams: 1, StreamRate: 16 << 10}
)

// Result is what a run measured.
type Result struct {
	Clients  int
	Duration time.Duration
	Summary  *Summary // the generator's report
	// ReadP99 is the largest p99 of the read kinds (ReadKinds);
	// BaselineP99 the p99 of the same reads by one client alone, before
	// the load.
	ReadP99, BaselineP99 time.Duration
	// Requests is every request the clients made; Answered those answered
	// 2xx or 429; Quota the 429s; Errors the rest (any other status, or
	// no answer).
	Requests, Answered, Quota, Errors int
	// StreamWritten is what the stream runs wrote, StreamRead what their
	// followers read; KeptUp says every follower read all of its run's
	// output and saw its end.
	StreamWritten, StreamRead int64
	KeptUp                    bool
	// ServerCPU is the server process's CPU over the generator's life
	// (its tasks' processes aside), ServerRSS its peak RSS; GenCPU and
	// GenRSS the generator's.
	streams           int
	rate              int64
	ServerCPU, GenCPU time.Duration
	ServerRSS, GenRSS int64
	// Start is the server's start (to listening), Setup the environment
	// and the stream runs, Load the generator's life, Stop the server's
	// shutdown.
	Start, Setup, Load, Stop time.Duration
}

// StreamBytesPerSec is the rate the followers read, summed: each one's
// bytes from its first output event to its last over that time. Below
// StreamWrittenPerSec, the streams fell behind the output.
func (r *Result) StreamBytesPerSec() float64 {
	var sum float64
	for _, f := range r.Summary.Follow {
		if d := f.LastByte - f.FirstByte; d > 0 {
			sum += float64(f.Read-f.FirstBytes) / d.Seconds()
		}
	}
	return sum
}

// StreamWrittenPerSec is the rate the stream runs wrote, summed: their
// pace (Config.Streams runs at Config.StreamRate bytes/s each).
func (r *Result) StreamWrittenPerSec() float64 { return float64(r.streams) * float64(r.rate) }

// String is one line of figures.
func (r *Result) String() string {
	if r == nil || r.Summary == nil {
		return "no result"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients for %s: %d requests (%.0f/s), %d answered 2xx or 429, %d 429s, %d errors; read p99 %s (one client alone: %s);",
		r.Clients, r.Duration, r.Requests, float64(r.Requests)/max(r.Summary.Elapsed.Seconds(), 1e-9), r.Answered, r.Quota, r.Errors,
		r.ReadP99.Round(time.Microsecond), r.BaselineP99.Round(time.Microsecond))
	for _, k := range []string{KindListEnvironments, KindReadLease, KindOpenStream, KindStartRun} {
		if s := r.Summary.Kinds[k]; s != nil {
			fmt.Fprintf(&b, " %s %d p50 %s p99 %s max %s statuses %v;", k, s.Count, s.P50.Round(time.Microsecond),
				s.P99.Round(time.Microsecond), s.Max.Round(time.Millisecond), s.Statuses)
		}
	}
	fmt.Fprintf(&b, " streams %d of %d bytes read (%.1f KB/s read, %.1f written), kept up %v; server CPU %s (%.0f%% of a core), peak RSS %d MiB; generator CPU %s, peak RSS %d MiB; server start %s, setup %s, load %s, stop %s",
		r.StreamRead, r.StreamWritten, r.StreamBytesPerSec()/1024, r.StreamWrittenPerSec()/1024, r.KeptUp, r.ServerCPU.Round(time.Millisecond),
		100*r.ServerCPU.Seconds()/max(r.Summary.Elapsed.Seconds(), 1e-9), r.ServerRSS>>20, r.GenCPU.Round(time.Millisecond), r.GenRSS>>20,
		r.Start.Round(time.Millisecond), r.Setup.Round(time.Millisecond), r.Load.Round(time.Millisecond), r.Stop.Round(time.Millisecond))
	return b.String()
}

// company is the company of the runs and leases; token the bearer token
// of the generator (an instance administrator of the tokens file).
const (
	company = "acme"
	token   = "apiload-admin-token-0123456789"
)

// Run starts the example server on cfg.StoreURL (a process of its own,
// listening on 127.0.0.1, the fake driver in test mode, its caps on runs
// and streams far above the mix's), creates a fake environment and
// cfg.Streams runs that write output for the window (their leases are
// the ones the clients read), and runs the load generator (a process of
// its own) against it. It stops by itself: the generator after
// Duration and its followers' grace, the whole run within twice Duration
// and five minutes (and ctx); the server is shut down (SIGTERM) at the
// end.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.ServerBinary == "" || cfg.GenBinary == "" || cfg.StoreURL == "" || cfg.Clients <= 0 || cfg.Duration <= 0 || cfg.Streams <= 0 || cfg.StreamRate <= 0 {
		return nil, errors.New("apiload: ServerBinary, GenBinary, StoreURL, Clients, Duration, Streams and StreamRate are required")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.Duration+5*time.Minute)
	defer cancel()
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "berth-apiload-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	}
	t0 := time.Now()
	srv, err := startServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	started := time.Since(t0)
	defer func() {
		t := time.Now()
		err = errors.Join(err, srv.stop())
		if res != nil {
			res.Stop = time.Since(t)
		}
	}()
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	call := func(method, path string, body, out any, header ...string) error {
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, method, srv.url+path, bytes.NewReader(b))
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		r, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("apiload: %s %s: %w", method, path, err)
		}
		defer r.Body.Close()
		rb, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if r.StatusCode/100 != 2 {
			return fmt.Errorf("apiload: %s %s answered %d: %s", method, path, r.StatusCode, bytes.TrimSpace(rb))
		}
		return json.Unmarshal(rb, out)
	}
	// The lease quotas (instance settings, 8 and 4 by default) far above
	// the mix's leases: a run's lease lives until its task ended and its
	// release, and every client may start one.
	var st struct {
		Revision int64 `json:"revision"`
	}
	if err := call("GET", "/api/v1/settings", nil, &st); err != nil {
		return nil, err
	}
	quota := 8*cfg.Clients + cfg.Streams
	if err := call("PATCH", "/api/v1/settings", map[string]any{"quotaPerCompany": quota, "quotaPerCompanyEnvironment": quota}, &st,
		"If-Match", fmt.Sprintf("%q", strconv.FormatInt(st.Revision, 10))); err != nil {
		return nil, err
	}
	var env struct{ ID string }
	if err := call("POST", "/api/v1/environments", map[string]any{"name": "apiload", "driver": "fake"}, &env); err != nil {
		return nil, err
	}
	total := cfg.StreamRate * int64(cfg.Duration/time.Millisecond) / 1000
	grace := 30 * time.Second
	gc := GenConfig{URL: srv.url, Token: token, Company: company, Environment: env.ID, StreamBytes: total,
		Clients: cfg.Clients, Duration: cfg.Duration, StreamHold: time.Second, FollowGrace: grace}
	for range cfg.Streams {
		var run struct {
			ID      string `json:"id"`
			LeaseID string `json:"leaseId"`
		}
		if err := call("POST", "/api/v1/companies/"+company+"/runs", map[string]any{"environmentId": env.ID,
			"argv":           []string{cfg.GenBinary, "emit", strconv.FormatInt(total, 10), strconv.FormatInt(cfg.StreamRate, 10)},
			"timeoutSeconds": int((cfg.Duration + 2*grace) / time.Second)}, &run); err != nil {
			return nil, err
		}
		gc.Streams, gc.Leases = append(gc.Streams, run.ID), append(gc.Leases, run.LeaseID)
	}

	// The generator.
	in, _ := json.Marshal(gc)
	gen := exec.CommandContext(ctx, cfg.GenBinary)
	gen.Stdin = bytes.NewReader(in)
	var out, stderr bytes.Buffer
	gen.Stdout, gen.Stderr = &out, &stderr
	gen.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cpu0 := srv.cpu()
	setup := time.Since(t0) - started
	t1 := time.Now()
	if err := gen.Run(); err != nil {
		return nil, fmt.Errorf("apiload: the generator: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	res = &Result{streams: cfg.Streams, rate: cfg.StreamRate, Start: started, Setup: setup, Load: time.Since(t1), Clients: cfg.Clients, Duration: cfg.Duration, ServerCPU: srv.cpu() - cpu0, ServerRSS: procField(srv.cmd.Process.Pid, "VmHWM:") << 10}
	if err := json.Unmarshal(out.Bytes(), &res.Summary); err != nil {
		return nil, fmt.Errorf("apiload: the generator's summary: %w: %s", err, out.Bytes())
	}
	res.GenCPU, res.GenRSS = res.Summary.CPU, res.Summary.MaxRSS
	if b := res.Summary.Baseline; b != nil {
		res.BaselineP99 = b.P99
		if b.Errors != 0 {
			return res, fmt.Errorf("apiload: %d of the baseline's %d reads failed: %v", b.Errors, b.Count, b.Samples)
		}
	}
	for k, s := range res.Summary.Kinds {
		res.Requests += s.Count
		res.Quota += s.Quota
		res.Errors += s.Errors
		for _, rk := range ReadKinds {
			if k == rk {
				res.ReadP99 = max(res.ReadP99, s.P99)
			}
		}
	}
	res.Answered = res.Requests - res.Errors
	res.KeptUp = len(res.Summary.Follow) > 0
	for _, f := range res.Summary.Follow {
		res.StreamWritten += f.Written
		res.StreamRead += f.Read
		res.KeptUp = res.KeptUp && f.KeptUp
	}
	// The stream runs wrote all they were to: each exited 0.
	for _, id := range gc.Streams {
		var v struct {
			Status string `json:"status"`
			Exit   *struct {
				Code int `json:"code"`
			} `json:"exit"`
		}
		if err := call("GET", "/api/v1/companies/"+company+"/runs/"+id, nil, &v); err != nil {
			return res, err
		}
		if v.Exit == nil || v.Exit.Code != 0 {
			return res, fmt.Errorf("apiload: stream run %s is %s with exit %+v, not exited 0: its output is not all written", id, v.Status, v.Exit)
		}
	}
	return res, nil
}

// server is the example server's process.
type server struct {
	cmd  *exec.Cmd
	url  string
	tail *tailBuffer
	done chan error
}

// startServer starts the server on cfg.StoreURL, listening on a free
// port of 127.0.0.1, and waits for its address.
func startServer(ctx context.Context, cfg Config) (*server, error) {
	tokens := filepath.Join(cfg.Dir, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"tokens": [{"token": "`+token+`", "role": "instance_admin", "id": "apiload"}]}`), 0o600); err != nil {
		return nil, err
	}
	many := strconv.Itoa(1 << 20)
	cmd := exec.Command(cfg.ServerBinary, "-listen", "127.0.0.1:0", "-data", filepath.Join(cfg.Dir, "data"), "-store", cfg.StoreURL,
		"-drivers", "fake", "-test-mode", "-tokens", tokens, "-xterm-dir", "",
		"-max-streams", many, "-max-runs-per-company", many, "-max-runs-per-principal", many, "-shutdown-timeout", "30s")
	// The fake's runner runs in the server's process: the runner binary
	// is checked (an ELF of this machine), never run.
	cmd.Env = append(os.Environ(), "BERTH_RUNNER_BINARY="+cfg.GenBinary)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("apiload: start the server %s: %w", cfg.ServerBinary, err)
	}
	s := &server{cmd: cmd, tail: &tailBuffer{}, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.tail.add(line)
			if strings.Contains(line, "msg=listening") {
				if _, a, ok := strings.Cut(line, "address="); ok {
					select {
					case addr <- strings.Fields(a)[0]:
					default:
					}
				}
			}
		}
		s.done <- cmd.Wait()
	}()
	select {
	case s.url = <-addr:
		return s, nil
	case err := <-s.done:
		s.done <- err
		return nil, fmt.Errorf("apiload: the server exited before it listened (%v): %s", err, s.tail)
	case <-time.After(2 * time.Minute):
	case <-ctx.Done():
	}
	_ = s.stop()
	return nil, fmt.Errorf("apiload: the server did not listen within 2 minutes: %s", s.tail)
}

// cpu is the server process's user and system CPU so far.
func (s *server) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name (which may hold spaces).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// stop shuts the server down as an operator does (SIGTERM; it stops its
// runs with proof and releases their leases), killing it when it takes
// longer than its shutdown timeout and a margin.
func (s *server) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			return fmt.Errorf("apiload: the server: %v: %s", err, s.tail)
		}
		return nil
	case <-time.After(45 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("apiload: the server did not shut down within 45 s: %s", s.tail)
	}
}

func procField(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// tailBuffer keeps the last lines of the server's log.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > 40 {
		t.lines = t.lines[len(t.lines)-40:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
