// Command testreport runs `go test -json` with the arguments it is given
// and prints what a person needs of the run (`make test`):
//
//   - each package's closing line (ok, FAIL, no test files), as go test does;
//   - the whole output of every test that failed, and of every test still
//     running when its package failed (a panic, a timeout);
//   - the output of the tests named by -show (the API counts), passed or not;
//   - at the end, the slowest tests and packages, the top-level tests that
//     skipped, the run's wall and CPU time, the messages of each failed
//     test (its "file.go:LINE: ..." lines, without the logs that may bury
//     them in its whole output), and the totals in one line ("N passed,
//     N failed, N skipped").
//
// With -events FILE it also writes go test's JSON events, as they came, to
// FILE (make test: last-test-events.json in the tools cache).
//
// It exits with go test's exit status (1 when go test could not run).
//
// Usage:
//
//	testreport [-slowest N] [-show REGEXP] [-events FILE] [go test flags and packages]
//
// Its own flags come first; everything from the first other argument on is
// go test's.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output events
}

type result struct {
	pkg, test string
	elapsed   time.Duration
}

// failure is a failed top-level test and its messages.
type failure struct {
	name     string // "pkg Test"
	messages []string
}

// message matches the first line of a t.Log, t.Error or t.Fatal message
// (go test indents it and names the file and line); a log line of a
// process the test started (a server's "time=... level=..." lines) has no
// such prefix.
var message = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// maxMessages bounds the messages kept of one failed test, and
// maxMessageLen each message's length.
const (
	maxMessages   = 12
	maxMessageLen = 400
)

// report reads the events and writes the person's view of them to w.
type report struct {
	w       io.Writer
	show    *regexp.Regexp
	outputs map[string][]string // "pkg test" -> output lines
	done    map[string]bool     // "pkg test" ended
	tests   []result            // top-level tests that ended, with their times
	pkgs    []result
	pass    int
	fail    int
	skip    int
	skipped []string // "pkg Test" of the top-level tests that skipped
	failed  []failure
	usage   string // printed before the totals; see usage
}

func newReport(w io.Writer, show *regexp.Regexp) *report {
	return &report{w: w, show: show, outputs: map[string][]string{}, done: map[string]bool{}}
}

func (r *report) event(e event) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "output":
		if e.Test == "" {
			if e.Output != "PASS\n" {
				fmt.Fprint(r.w, e.Output)
			}
			return
		}
		r.outputs[key] = append(r.outputs[key], e.Output)
	case "pass", "fail", "skip":
		if e.Test == "" {
			r.pkgs = append(r.pkgs, result{pkg: e.Package, elapsed: seconds(e.Elapsed)})
			if e.Action == "fail" {
				r.unfinished(e.Package)
			}
			r.drop(e.Package)
			return
		}
		r.done[key] = true
		top := !strings.Contains(e.Test, "/")
		switch e.Action {
		case "pass":
			if top {
				r.pass++
			}
			if r.show != nil && top && r.show.MatchString(e.Test) {
				r.print(key, "")
			}
		case "skip":
			if top {
				r.skip++
				r.skipped = append(r.skipped, e.Package+" "+e.Test)
			}
		case "fail":
			if top {
				r.fail++
				r.print(key, "")
				r.failed = append(r.failed, failure{name: key, messages: r.messages(key)})
			}
		}
		if top {
			r.tests = append(r.tests, result{pkg: e.Package, test: e.Test, elapsed: seconds(e.Elapsed)})
		}
	}
}

// print writes a test's output (its subtests' lines are part of it).
func (r *report) print(key, note string) {
	pkg, test, _ := strings.Cut(key, " ")
	fmt.Fprintf(r.w, "=== %s %s%s\n", pkg, test, note)
	for _, l := range r.outputs[key] {
		fmt.Fprint(r.w, l)
	}
	for _, k := range sortedKeys(r.outputs) {
		if strings.HasPrefix(k, key+"/") {
			for _, l := range r.outputs[k] {
				fmt.Fprint(r.w, l)
			}
		}
	}
}

// messages returns the messages of a test and its subtests, at most
// maxMessages of them, each cut at maxMessageLen bytes.
func (r *report) messages(key string) []string {
	var ms []string
	add := func(lines []string) {
		for _, l := range lines {
			if len(ms) == maxMessages {
				return
			}
			if message.MatchString(l) {
				l = strings.TrimSpace(l)
				if len(l) > maxMessageLen {
					l = l[:maxMessageLen] + " ..."
				}
				ms = append(ms, l)
			}
		}
	}
	add(r.outputs[key])
	for _, k := range sortedKeys(r.outputs) {
		if strings.HasPrefix(k, key+"/") {
			add(r.outputs[k])
		}
	}
	return ms
}

// unfinished prints the output of a failed package's tests that never
// ended (the one running when it panicked or timed out).
func (r *report) unfinished(pkg string) {
	for _, k := range sortedKeys(r.outputs) {
		if strings.HasPrefix(k, pkg+" ") && !strings.Contains(k[len(pkg)+1:], "/") && !r.done[k] {
			r.print(k, " (did not end)")
		}
	}
}

// drop forgets a finished package's buffered output.
func (r *report) drop(pkg string) {
	for k := range r.outputs {
		if strings.HasPrefix(k, pkg+" ") {
			delete(r.outputs, k)
			delete(r.done, k)
		}
	}
}

// summary prints the slowest tests and packages and the totals.
func (r *report) summary(n int) {
	slowest := func(title string, rs []result, name func(result) string) {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].elapsed > rs[j].elapsed })
		fmt.Fprintf(r.w, "\n%s:\n", title)
		for _, x := range rs[:min(n, len(rs))] {
			fmt.Fprintf(r.w, "%8.1fs  %s\n", x.elapsed.Seconds(), name(x))
		}
	}
	slowest("slowest tests", r.tests, func(x result) string { return x.pkg + " " + x.test })
	slowest("slowest packages", r.pkgs, func(x result) string { return x.pkg })
	if len(r.skipped) > 0 {
		fmt.Fprintf(r.w, "\nskipped:\n")
		for _, s := range r.skipped {
			fmt.Fprintf(r.w, "  %s\n", s)
		}
	}
	if r.usage != "" {
		fmt.Fprintf(r.w, "\n%s\n", r.usage)
	}
	if len(r.failed) > 0 {
		fmt.Fprintf(r.w, "\nwhy they failed (the tests' own messages; their whole output is above):\n")
		for _, f := range r.failed {
			fmt.Fprintf(r.w, "  %s\n", f.name)
			for _, m := range f.messages {
				fmt.Fprintf(r.w, "    %s\n", m)
			}
			if len(f.messages) == 0 {
				fmt.Fprintf(r.w, "    (no message: see its output above)\n")
			}
		}
	}
	fmt.Fprintf(r.w, "\n%d passed, %d failed, %d skipped\n", r.pass, r.fail, r.skip)
}

// usage says how long go test ran and how much CPU it and the test binaries
// it waited for used, and what share of the machine's cores that was: a
// share well under 100% means the run waited on components (containers,
// databases) more than it computed.
func usage(wall time.Duration, ps *os.ProcessState, cores int) string {
	cpu := ps.UserTime() + ps.SystemTime()
	return fmt.Sprintf("go test: %.0fs wall, %.0fs CPU (user+sys of go test, the compiler and the test binaries), %.0f%% of %d cores",
		wall.Seconds(), cpu.Seconds(), 100*cpu.Seconds()/(wall.Seconds()*float64(cores)), cores)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ownFlags splits the arguments into testreport's own leading flags
// (-slowest, -show; "-f v" or "-f=v") and the rest, which go test gets: from
// the first other argument on, or after a "--".
func ownFlags(args []string) (own, rest []string) {
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			return own, args[i+1:]
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || name != "slowest" && name != "show" && name != "events" {
			return own, args[i:]
		}
		own = append(own, args[i])
		if !hasValue && i+1 < len(args) {
			i++
			own = append(own, args[i])
		}
	}
	return own, nil
}

func main() {
	fs := flag.NewFlagSet("testreport", flag.ExitOnError)
	slowest := fs.Int("slowest", 10, "how many of the slowest tests and packages to print")
	show := fs.String("show", "", "print the output of the top-level tests matching this regular expression even when they pass")
	events := fs.String("events", "", "also write go test's JSON events to this file, for a look at where the time went")
	own, rest := ownFlags(os.Args[1:])
	fs.Parse(own) // ExitOnError: a bad flag exits with status 2
	var re *regexp.Regexp
	if *show != "" {
		re = regexp.MustCompile(*show)
	}
	cmd := exec.Command("go", append([]string{"test", "-json"}, rest...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	r := newReport(os.Stdout, re)
	var keep *bufio.Writer
	closeEvents := func() {}
	if *events != "" {
		f, err := os.Create(*events)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(1)
		}
		keep = bufio.NewWriter(f)
		closeEvents = func() {
			if err := errors.Join(keep.Flush(), f.Close()); err != nil {
				fmt.Fprintln(os.Stderr, "testreport: writing the events:", err)
			}
		}
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if keep != nil {
			keep.Write(sc.Bytes())
			keep.WriteByte('\n')
		}
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Println(sc.Text()) // not an event: go test's own words
			continue
		}
		r.event(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: reading go test's output:", err)
	}
	closeEvents()
	err = cmd.Wait()
	if cmd.ProcessState != nil {
		r.usage = usage(time.Since(start), cmd.ProcessState, runtime.NumCPU())
	}
	r.summary(*slowest)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	if r.fail > 0 {
		os.Exit(1)
	}
}
