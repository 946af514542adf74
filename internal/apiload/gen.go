package apiload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The kinds of request of the mix.
const (
	KindListEnvironments = "list_environments" // GET /api/v1/environments
	KindReadLease        = "read_lease"        // GET …/leases/{id}
	KindOpenStream       = "open_stream"       // GET …/runs/{id}/output as text/event-stream, held StreamHold
	KindStartRun         = "start_run"         // POST …/runs on the fake (true)
)

// Kinds are the mix's kinds, in the order a client cycles through them
// (reads three times as often as a stream or a run).
var Kinds = []string{KindListEnvironments, KindReadLease, KindListEnvironments, KindReadLease, KindOpenStream,
	KindListEnvironments, KindReadLease, KindStartRun}

// ReadKinds are the kinds the read goal (p99) is about.
var ReadKinds = []string{KindListEnvironments, KindReadLease}

// GenConfig is one run of the load generator (internal/cmd/apiload).
type GenConfig struct {
	URL     string `json:"url"`     // the server's base URL, on loopback
	Token   string `json:"token"`   // bearer token of every request
	Company string `json:"company"` // the company of the leases and runs
	// Environment is the fake environment the runs start on.
	Environment string `json:"environment"`
	// Leases are the leases read; Streams the runs whose output is
	// followed (one follower each, from the start to the run's end) and
	// opened by the clients' open_stream requests; StreamBytes what each
	// of those runs writes in all.
	Leases      []string `json:"leases"`
	Streams     []string `json:"streams"`
	StreamBytes int64    `json:"streamBytes"`
	Clients     int      `json:"clients"`
	// Duration is how long the clients loop; StreamHold how long an
	// open_stream request reads before it closes the stream.
	Duration   time.Duration `json:"duration"`
	StreamHold time.Duration `json:"streamHold"`
	// FollowGrace is how long past Duration a follower waits for its
	// run's end before it gives up (the stream did not keep up).
	FollowGrace time.Duration `json:"followGrace"`
}

// KindSummary is what the generator saw of one kind of request.
type KindSummary struct {
	Count    int           `json:"count"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
	Max      time.Duration `json:"max"`
	Statuses map[int]int   `json:"statuses"` // by HTTP status; 0: no answer (a transport error)
	// Quota is the 429s; Errors every other answer that is not 2xx (and
	// the requests that got no answer), with a few of them in Samples.
	Quota   int      `json:"quota"`
	Errors  int      `json:"errors"`
	Samples []string `json:"samples,omitempty"`
	// Bytes is the output read (open_stream).
	Bytes int64 `json:"bytes,omitempty"`
}

// FollowSummary is one follower of a run's output: Read of Written
// bytes, and when the first and last of them arrived (from the
// generator's start). KeptUp: every byte arrived and the run's end was
// seen within the grace.
type FollowSummary struct {
	Run      string        `json:"run"`
	Written  int64         `json:"written"`
	Read     int64         `json:"read"`
	Events   int           `json:"events"`
	LastByte time.Duration `json:"lastByte"`
	// FirstByte is when the first output event arrived, FirstBytes its
	// size: the rate read is (Read-FirstBytes)/(LastByte-FirstByte).
	FirstByte  time.Duration `json:"firstByte"`
	FirstBytes int64         `json:"firstBytes"`
	Ended      bool          `json:"ended"`
	KeptUp     bool          `json:"keptUp"`
	Error      string        `json:"error,omitempty"`
}

// Summary is the generator's report, one JSON object on its stdout.
type Summary struct {
	Clients int                     `json:"clients"`
	Elapsed time.Duration           `json:"elapsed"` // the clients' window
	Kinds   map[string]*KindSummary `json:"kinds"`
	Follow  []FollowSummary         `json:"follow"`
	// Baseline is the reads (ReadKinds, alternated) of one client alone,
	// before the load: the anchor of the reads' latency under load.
	Baseline *KindSummary `json:"baseline"`
	// CPU and MaxRSS are the generator process's own.
	CPU    time.Duration `json:"cpu"`
	MaxRSS int64         `json:"maxRSS"`
}

// kindStats collects one kind's latencies and statuses.
type kindStats struct {
	mu        sync.Mutex
	latencies []time.Duration
	statuses  map[int]int
	samples   []string
	bytes     int64
}

func (k *kindStats) add(d time.Duration, status int, sample string, n int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.latencies = append(k.latencies, d)
	k.statuses[status]++
	k.bytes += n
	if !ok(status) && status != http.StatusTooManyRequests && len(k.samples) < 5 {
		k.samples = append(k.samples, fmt.Sprintf("%d %s", status, sample))
	}
}

func ok(status int) bool { return status >= 200 && status < 300 }

func (k *kindStats) summary() *KindSummary {
	k.mu.Lock()
	defer k.mu.Unlock()
	slices.Sort(k.latencies)
	s := &KindSummary{Count: len(k.latencies), Statuses: k.statuses, Samples: k.samples, Bytes: k.bytes,
		P50: quantile(k.latencies, 0.50), P99: quantile(k.latencies, 0.99)}
	if n := len(k.latencies); n > 0 {
		s.Max = k.latencies[n-1]
	}
	for st, n := range k.statuses {
		switch {
		case st == http.StatusTooManyRequests:
			s.Quota += n
		case !ok(st):
			s.Errors += n
		}
	}
	return s
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// requestTimeout bounds every request but the streams (whose reading is
// bounded by StreamHold and the followers' grace).
const requestTimeout = 30 * time.Second

// Generate runs cfg.Clients clients, each looping over Kinds for
// cfg.Duration, and one follower per stream run; it returns when the
// clients are done and every follower saw its run's end or gave up
// (Duration plus FollowGrace), so it stops by itself.
func Generate(ctx context.Context, cfg GenConfig) (*Summary, error) {
	if cfg.URL == "" || cfg.Clients <= 0 || cfg.Duration <= 0 || len(cfg.Leases) == 0 || len(cfg.Streams) == 0 || cfg.Environment == "" {
		return nil, fmt.Errorf("apiload: the generator needs a URL, clients, a duration, leases, streams and an environment")
	}
	if cfg.StreamHold <= 0 {
		cfg.StreamHold = time.Second
	}
	if cfg.FollowGrace <= 0 {
		cfg.FollowGrace = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+cfg.FollowGrace+requestTimeout)
	defer cancel()
	tr := &http.Transport{MaxIdleConns: 2 * cfg.Clients, MaxIdleConnsPerHost: 2 * cfg.Clients, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	g := &gen{cfg: cfg, hc: hc, stats: map[string]*kindStats{}, heads: make([]atomic.Uint64, len(cfg.Streams))}
	for _, k := range Kinds {
		g.stats[k] = &kindStats{statuses: map[int]int{}}
	}
	// The baseline: one client's reads alone.
	base := &kindStats{statuses: map[int]int{}}
	for i := range baselineReads {
		g.one(ctx, ReadKinds[i%len(ReadKinds)], i, base)
	}
	start := time.Now()
	follow := make([]FollowSummary, len(cfg.Streams))
	var fwg sync.WaitGroup
	for i := range cfg.Streams {
		fwg.Go(func() { follow[i] = g.follow(ctx, i, start) })
	}
	var wg sync.WaitGroup
	end := start.Add(cfg.Duration)
	for c := range cfg.Clients {
		wg.Go(func() {
			for i := c; time.Now().Before(end) && ctx.Err() == nil; i++ {
				k := Kinds[i%len(Kinds)]
				g.one(ctx, k, c+i, g.stats[k])
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	fwg.Wait()
	s := &Summary{Clients: cfg.Clients, Elapsed: elapsed, Kinds: map[string]*KindSummary{}, Follow: follow, Baseline: base.summary()}
	for k, st := range g.stats {
		s.Kinds[k] = st.summary()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		s.MaxRSS = ru.Maxrss << 10
	}
	return s, nil
}

type gen struct {
	cfg   GenConfig
	hc    *http.Client
	stats map[string]*kindStats
	// heads are the last output seq each stream's follower read: an
	// open_stream request starts there (a viewer opening a live run's
	// output), so it reads what comes next, not the whole history.
	heads []atomic.Uint64
}

func (g *gen) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.cfg.URL+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+g.cfg.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// baselineReads is how many reads the baseline makes.
const baselineReads = 40

// one sends one request of kind (n picks the lease or stream) and
// records it in st.
func (g *gen) one(ctx context.Context, kind string, n int, st *kindStats) {
	if kind == KindOpenStream {
		g.openStream(ctx, n%len(g.cfg.Streams), st)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var req *http.Request
	var err error
	company := "/api/v1/companies/" + g.cfg.Company
	switch kind {
	case KindListEnvironments:
		req, err = g.request(rctx, "GET", "/api/v1/environments", nil)
	case KindReadLease:
		req, err = g.request(rctx, "GET", company+"/leases/"+g.cfg.Leases[n%len(g.cfg.Leases)], nil)
	case KindStartRun:
		req, err = g.request(rctx, "POST", company+"/runs", map[string]any{
			"environmentId": g.cfg.Environment, "argv": []string{"true"}, "timeoutSeconds": 60})
	}
	if err != nil {
		st.add(0, 0, err.Error(), 0)
		return
	}
	t0 := time.Now()
	res, err := g.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			st.add(time.Since(t0), 0, err.Error(), 0)
		}
		return
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	d := time.Since(t0)
	status := res.StatusCode
	if err != nil {
		status = 0
	}
	sample := ""
	if !ok(status) {
		sample = strings.TrimSpace(string(b))
		if err != nil {
			sample = err.Error()
		}
	}
	st.add(d, status, sample, 0)
}

// openStream opens stream i's output as events from its follower's head
// and reads it for StreamHold (or to its end): the latency recorded is
// the time to the response's headers, the bytes are the output's text.
func (g *gen) openStream(ctx context.Context, i int, st *kindStats) {
	rctx, cancel := context.WithTimeout(ctx, g.cfg.StreamHold+requestTimeout)
	defer cancel()
	req, err := g.request(rctx, "GET", "/api/v1/companies/"+g.cfg.Company+"/runs/"+g.cfg.Streams[i]+"/output", nil)
	if err != nil {
		st.add(0, 0, err.Error(), 0)
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	if h := g.heads[i].Load(); h > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(h, 10))
	}
	t0 := time.Now()
	res, err := g.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			st.add(time.Since(t0), 0, err.Error(), 0)
		}
		return
	}
	defer res.Body.Close()
	d := time.Since(t0)
	if !ok(res.StatusCode) {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		st.add(d, res.StatusCode, strings.TrimSpace(string(b)), 0)
		return
	}
	hold := time.AfterFunc(g.cfg.StreamHold, cancel)
	defer hold.Stop()
	var n int64
	status := res.StatusCode
	sample := ""
	_ = readEvents(res.Body, func(event string, data []byte) bool {
		switch event {
		case "output":
			var c struct {
				Text      string `json:"text"`
				Truncated int64  `json:"truncated"`
			}
			if json.Unmarshal(data, &c) != nil {
				status, sample = 0, "an output event that is not JSON: "+string(data)
				return false
			}
			n += int64(len(c.Text))
		case "error":
			status, sample = 0, "error event: "+string(data)
			return false
		case "end":
			return false
		}
		return true
	})
	st.add(d, status, sample, n)
}

// follow reads stream i's output from its start to its end event (or
// Duration plus FollowGrace) and counts its bytes.
func (g *gen) follow(ctx context.Context, i int, start time.Time) FollowSummary {
	fs := FollowSummary{Run: g.cfg.Streams[i], Written: g.cfg.StreamBytes}
	deadline := start.Add(g.cfg.Duration + g.cfg.FollowGrace)
	fctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var from uint64
	// A stream cut (the server's write timeout, a transport error) is
	// opened again from the last event read, as an EventSource does.
	for fctx.Err() == nil && !fs.Ended {
		req, err := g.request(fctx, "GET", "/api/v1/companies/"+g.cfg.Company+"/runs/"+fs.Run+"/output", nil)
		if err != nil {
			fs.Error = err.Error()
			break
		}
		req.Header.Set("Accept", "text/event-stream")
		if from > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatUint(from, 10))
		}
		res, err := g.hc.Do(req)
		if err != nil {
			fs.Error = err.Error()
			pause(fctx)
			continue
		}
		if !ok(res.StatusCode) {
			b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
			res.Body.Close()
			fs.Error = fmt.Sprintf("%d %s", res.StatusCode, strings.TrimSpace(string(b)))
			break
		}
		err = readEvents(res.Body, func(event string, data []byte) bool {
			switch event {
			case "output":
				var c struct {
					Seq  uint64 `json:"seq"`
					Text string `json:"text"`
				}
				if err := json.Unmarshal(data, &c); err != nil {
					fs.Error = "an output event that is not JSON"
					return false
				}
				fs.Read += int64(len(c.Text))
				fs.Events++
				fs.LastByte = time.Since(start)
				if fs.Events == 1 {
					fs.FirstByte, fs.FirstBytes = fs.LastByte, fs.Read
				}
				from = c.Seq
				g.heads[i].Store(c.Seq)
			case "error":
				fs.Error = "error event: " + string(data)
				return false
			case "end":
				fs.Ended = true
				return false
			}
			return true
		})
		res.Body.Close()
		if fs.Error != "" && !fs.Ended {
			break
		}
		if !fs.Ended {
			pause(fctx) // cut: open it again
		}
		_ = err
	}
	fs.KeptUp = fs.Ended && fs.Read == fs.Written && fs.Error == ""
	return fs
}

// pause waits a tenth of a second, or less when ctx ends.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

// readEvents reads text/event-stream events from r and calls fn with
// each one's event name and data until fn returns false or r ends.
func readEvents(r io.Reader, fn func(event string, data []byte) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var event string
	var data []byte
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: gather it.
			long := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if event != "" || data != nil {
				if !fn(event, data) {
					return nil
				}
			}
			event, data = "", nil
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data[:0:0], line[len("data: "):]...)
		}
	}
}

// Emit is a stream run's task (apiload emit): it writes total bytes of
// lines to w at rate bytes/s, in ten writes a second.
func Emit(w io.Writer, total, rate int64) error {
	if total < 0 || rate <= 0 {
		return fmt.Errorf("apiload emit: want a total of at least 0 bytes and a rate above 0, got %d and %d", total, rate)
	}
	line := []byte(strings.Repeat("apiload output line 0123456789abcdefghijklmnopqrstuvwxyz ......", 1) + "\n")
	step := max(rate/10, 1)
	buf := make([]byte, 0, step+int64(len(line)))
	start := time.Now()
	var written int64
	for written < total {
		n := min(step, total-written)
		buf = buf[:0]
		for int64(len(buf)) < n {
			buf = append(buf, line[:min(int64(len(line)), n-int64(len(buf)))]...)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		written += n
		// Paced to the rate from the start (no drift).
		if d := time.Until(start.Add(time.Duration(float64(written) / float64(rate) * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
	}
	return nil
}
