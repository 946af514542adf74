package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/term"

	"github.com/berthdev/berth/templates"
)

const setupUsage = `usage: envctl image setup ENV [--script FILE] [--interactive] [--name N] [--promote] [--rebuild] [--ttl D]
       envctl image session show|cancel SESSION
       envctl image session capture SESSION [--promote]
       envctl image terminal SESSION

setup leases a setup sandbox of ENV (instance-scoped: no --company) from
its current image, runs the script's steps (progress on stderr) and then:
with --interactive, opens a terminal in it (raw mode; exit the shell to
return), asks whether to capture the sandbox as a template and whether to
promote it; without, captures once the steps succeed, and promotes with
--promote. A script with the same content as a finished template is
answered with that template and builds nothing (--rebuild builds anyway).
The script is JSON: {"steps": [{"run": ["sh", "-c", "..."]},
{"write": {"path": "/etc/motd", "mode": "0644", "content": "..."}}]}.
Files written by the steps and in the terminal (shell history included)
are captured as they are. With --json the session is printed on stdout
as JSON and the terminal uses stderr. 'lease sweep' ends sessions past their TTL and
destroys their sandboxes.
`

// lazyFile opens its file at the first Read: setup reads the script only
// after the driver's capabilities were checked.
type lazyFile struct {
	path string
	f    *os.File
}

func (l *lazyFile) Read(p []byte) (int, error) {
	if l.f == nil {
		f, err := os.Open(l.path)
		if err != nil {
			return 0, err
		}
		l.f = f
	}
	return l.f.Read(p)
}

func (l *lazyFile) close() {
	if l.f != nil {
		_ = l.f.Close()
	}
}

func runSetup(ctx context.Context, g *globals, args []string) error {
	cmd, args := args[0], args[1:]
	verb := ""
	if cmd == "session" {
		if len(args) == 0 {
			fmt.Fprint(g.stderr, setupUsage)
			return errUsage
		}
		verb, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("image "+cmd, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	script := fs.String("script", "", "JSON script of setup steps")
	interactive := fs.Bool("interactive", false, "open a terminal in the setup sandbox")
	name := fs.String("name", "", "name of the template captured")
	promote := fs.Bool("promote", false, "promote the template captured")
	rebuild := fs.Bool("rebuild", false, "build even when a template has the script's content hash")
	ttl := fs.Duration("ttl", 0, "the session's TTL, pushed back while envctl works and by terminal input (default 30m)")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) != 1 || cmd == "session" && verb != "show" && verb != "cancel" && verb != "capture" {
		fmt.Fprint(g.stderr, setupUsage)
		return errUsage
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	svc := sys.Templates()
	in := newInput(g.stdin)
	switch cmd {
	case "setup":
		if *script == "" && !*interactive {
			return fmt.Errorf("image setup %s: give --script FILE, --interactive or both", pos[0])
		}
		envID, err := lookupID(ctx, g, sys.Catalog(), pos[0])
		if err != nil {
			return err
		}
		req := templates.SetupRequest{Environment: envID, Name: *name, Interactive: *interactive, Promote: *promote && !*interactive, Rebuild: *rebuild, TTL: *ttl,
			Progress: func(e *templates.SessionEvent) { fmt.Fprintf(g.stderr, "setup: [%d] %s\n", e.Seq, e.Message) }}
		if *script != "" {
			lf := &lazyFile{path: *script}
			defer lf.close()
			req.Script = lf
		}
		ses, err := svc.Setup(ctx, g.as, req)
		if err != nil {
			if ses != nil {
				_ = printSession(g, ses)
			}
			return fmt.Errorf("image setup %s: %w", pos[0], err)
		}
		if !*interactive {
			return printSession(g, ses)
		}
		fmt.Fprintf(g.stderr, "setup: session %s: terminal open; exit the shell to return\n", ses.ID)
		if err := terminal(ctx, g, svc, ses.ID, in); err != nil {
			return err
		}
		if !in.ask(g, "capture this sandbox as a template? [y/N] ") {
			if ses, err = svc.Cancel(ctx, g.as, ses.ID); err != nil {
				return fmt.Errorf("image setup: cancel %s: %w", ses.ID, err)
			}
			return printSession(g, ses)
		}
		if ses, err = svc.CaptureSession(ctx, g.as, ses.ID, false); err != nil {
			_ = printSession(g, ses)
			return fmt.Errorf("image setup: capture %s: %w", ses.ID, err)
		}
		if in.ask(g, "promote it? [y/N] ") {
			if _, err := svc.Promote(ctx, g.as, ses.Template); err != nil {
				_ = printSession(g, ses)
				return fmt.Errorf("image setup: promote %s: %w", ses.Template, err)
			}
			if ses, err = svc.Session(ctx, g.as, ses.ID); err != nil {
				return err
			}
			ses.State = templates.SessionPromoted
		}
		return printSession(g, ses)
	case "terminal":
		return terminal(ctx, g, svc, pos[0], in)
	}
	var ses *templates.Session
	switch verb {
	case "show":
		ses, err = svc.Session(ctx, g.as, pos[0])
		if err == nil && !g.json {
			ev, eerr := svc.Events(ctx, g.as, pos[0], 0)
			if eerr != nil {
				return eerr
			}
			if perr := printSession(g, ses); perr != nil {
				return perr
			}
			for _, e := range ev {
				fmt.Fprintf(g.stdout, "  [%d] %s %s: %s\n", e.Seq, e.At.Format("15:04:05"), e.State, e.Message)
			}
			return nil
		}
	case "cancel":
		ses, err = svc.Cancel(ctx, g.as, pos[0])
	case "capture":
		ses, err = svc.CaptureSession(ctx, g.as, pos[0], *promote)
	}
	if ses != nil {
		if perr := printSession(g, ses); perr != nil {
			return perr
		}
	}
	if err != nil {
		return fmt.Errorf("image session %s %s: %w", verb, pos[0], err)
	}
	return nil
}

func printSession(g *globals, s *templates.Session) error {
	if g.json {
		return writeJSON(g.stdout, s)
	}
	fmt.Fprintf(g.stdout, "setup session %s of environment %s: %s\n", s.ID, s.Environment, s.State)
	if s.Template != "" {
		reused := ""
		if s.Reused {
			reused = " (reused: same content hash, nothing built)"
		}
		fmt.Fprintf(g.stdout, "  template: %s%s\n", s.Template, reused)
	}
	if s.Lease != "" {
		fmt.Fprintf(g.stdout, "  setup lease: %s (cleanup %s)\n", s.Lease, dash(s.LeaseCleanup))
	}
	if s.FailureReason != "" {
		fmt.Fprintf(g.stdout, "  reason: %s\n", s.FailureReason)
	}
	return nil
}

// input reads stdin in one goroutine, so that the terminal and the
// questions after it share it without a read left pending.
type input struct {
	ch   chan []byte
	rest []byte
	once sync.Once
	r    io.Reader
}

func newInput(r io.Reader) *input { return &input{r: r, ch: make(chan []byte, 16)} }

func (in *input) start() {
	in.once.Do(func() {
		go func() {
			defer close(in.ch)
			buf := make([]byte, 4096)
			for {
				n, err := in.r.Read(buf)
				if n > 0 {
					in.ch <- append([]byte(nil), buf[:n]...)
				}
				if err != nil {
					return
				}
			}
		}()
	})
}

// ask prints q on stderr and reads a line: true for y or yes.
func (in *input) ask(g *globals, q string) bool {
	in.start()
	fmt.Fprint(g.stderr, q)
	var line []byte
	for {
		if i := strings.IndexByte(string(in.rest), '\n'); i >= 0 {
			line, in.rest = append(line, in.rest[:i]...), in.rest[i+1:]
			break
		}
		line = append(line, in.rest...)
		in.rest = nil
		b, ok := <-in.ch
		if !ok {
			break
		}
		in.rest = b
	}
	a := strings.ToLower(strings.TrimSpace(string(line)))
	return a == "y" || a == "yes"
}

// terminal opens the session's terminal on this process's terminal: raw
// mode when stdin is one, SIGWINCH forwarded, until the shell exits.
func terminal(ctx context.Context, g *globals, svc *templates.Service, id string, in *input) error {
	rows, cols := 24, 80
	fd := -1
	if f, ok := g.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd = int(f.Fd())
		if w, h, err := term.GetSize(fd); err == nil {
			rows, cols = h, w
		}
	}
	ts, err := svc.OpenTerminal(ctx, g.as, id, rows, cols)
	if err != nil {
		return fmt.Errorf("image terminal %s: %w", id, err)
	}
	defer ts.Close()
	if fd >= 0 {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("image terminal %s: raw mode: %w", id, err)
		}
		defer func() { _ = term.Restore(fd, old) }()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(fd); err == nil {
					_ = ts.Resize(ctx, h, w)
				}
			}
		}()
	}
	in.start()
	done := make(chan struct{})
	screen := g.stdout
	if g.json { // stdout carries the JSON result alone
		screen = g.stderr
	}
	go func() {
		_, _ = io.Copy(screen, ts)
		close(done)
	}()
	if len(in.rest) > 0 {
		_, _ = ts.Write(in.rest)
		in.rest = nil
	}
	for {
		select {
		case <-done:
			_, err := ts.Wait(ctx)
			if err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintf(g.stderr, "\r\nterminal: %v\r\n", err)
			}
			fmt.Fprint(g.stderr, "\r\n")
			return nil
		case b, ok := <-in.ch:
			if !ok { // stdin ended: nobody types any more
				_ = ts.Close()
				<-done
				return nil
			}
			if _, err := ts.Write(b); err != nil {
				<-done
				return nil
			}
		}
	}
}
