// Command runner is berth's reference runner (internal/runner) as a binary: it
// runs inside a sandbox, dials out to the controller and executes the tasks
// it is sent. Build it static (no cgo), so that it runs on any Linux libc:
//
//	CGO_ENABLED=0 go build -o berth-runner ./cmd/berth-runner
//
// Usage:
//
//	berth-runner --controller URL --lease LEASE [--ticket-file PATH]
//		[--state-dir DIR] [--log-level LEVEL]
//
// The bootstrap ticket comes from --ticket-file (a file of mode 0600, removed
// as soon as it is read) or from the BERTH_PRP_TICKET environment variable
// (unset as soon as it is read); either way before any task starts, and no
// task ever sees it. Before it reads the ticket the runner makes itself
// non-dumpable (prctl PR_SET_DUMPABLE 0), so that its tasks, which run as
// the same user, cannot read its memory, environment or fds, or ptrace it.
// Its connection token and state key live in its memory only, never in
// --state-dir: a runner restarted on the same --state-dir rejoins its
// session with a resume ticket (which Attach mints when it relaunches it)
// and replays its journal and outbox. Its argv holds nothing secret.
//
// The runner makes itself a child subreaper, so that processes a task
// orphans (double forks, setsid) are reaped by it rather than left to init.
//
// SIGTERM or SIGINT stop the runner's tasks (keeping the proofs for the
// controller) and end it with status 0; a refusal by the controller ends
// it with status 1.
//
// # Relay mode
//
//	berth-runner relay --socket PATH
//
// runs the sandbox's side of an exec relay (internal/execrelay), for a
// driver whose sandbox has no network path to the host: the host runs it
// through a streaming exec, and it listens on the unix socket PATH (its
// directory created 0700, a stale socket removed) and carries each
// connection made there to the host, multiplexed over its standard input
// and output; a runner started with --controller unix:PATH reaches the
// controller through it. It makes itself non-dumpable first, so that no
// task can write to its standard input through /proc. It ends with status
// 0, removing its socket, when its standard input ends (the host's exec
// went away) or on SIGTERM or SIGINT; with status 1 when it cannot bind the
// socket. Its argv and environment hold nothing secret.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/berthdev/berth/internal/execrelay"
	"github.com/berthdev/berth/internal/runner"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		os.Exit(relay(os.Args[2:], pollable(syscall.Stdin, os.Stdin), pollable(syscall.Stdout, os.Stdout), os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

// pollable returns fd as a file whose Close interrupts a Read or Write in
// progress (non-blocking, in Go's poller), else f: the relay ends its
// session, which waits for its reads of stdin and writes to stdout, also
// when it ends on its own (a signal, its socket replaced) while the host
// sends nothing.
func pollable(fd int, f *os.File) *os.File {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return f
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// relay is the relay mode: berth-runner relay --socket PATH.
func relay(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("berth-runner relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the unix socket to listen on (an absolute path)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "berth-runner relay: usage: berth-runner relay --socket PATH")
		return 2
	}
	if err := runner.MakeUndumpable(); err != nil {
		fmt.Fprintln(stderr, "berth-runner relay:", err)
		return 1
	}
	// A write to the host's end of a broken pipe returns EPIPE, which ends
	// the session and removes the socket, rather than killing the relay.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := execrelay.Serve(ctx, *socket, stdin, stdout, &execrelay.RelayOptions{Logger: log}); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "berth-runner relay:", err)
		return 1
	}
	return 0
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("berth-runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	controller := fs.String("controller", "", "the controller's PRP base URL (http, https, ws or wss)")
	lease := fs.String("lease", "", "the lease the ticket was minted for")
	ticketFile := fs.String("ticket-file", "", "a 0600 file holding the bootstrap ticket; removed once read")
	stateDir := fs.String("state-dir", defaultStateDir(), "the directory for the journal and outbox (no secret is kept there)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *controller == "" {
		fmt.Fprintln(stderr, "berth-runner: --controller is required")
		return 2
	}
	if err := runner.MakeUndumpable(); err != nil {
		fmt.Fprintln(stderr, "berth-runner:", err)
		return 1
	}
	ticket, err := takeTicket(*ticketFile)
	if err != nil {
		fmt.Fprintln(stderr, "berth-runner:", err)
		return 1
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(stderr, "berth-runner: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	r, err := runner.New(*controller, *stateDir, &runner.Options{Lease: *lease, Ticket: ticket, Logger: log, Subreaper: true})
	if err != nil {
		fmt.Fprintln(stderr, "berth-runner:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "berth-runner:", err)
		return 1
	}
	return 0
}

// takeTicket reads the ticket from path (refusing a file others can read,
// and removing it at once) or from runner.TicketEnv (unsetting it at
// once).
func takeTicket(path string) (string, error) {
	env, fromEnv := os.LookupEnv(runner.TicketEnv)
	os.Unsetenv(runner.TicketEnv)
	if path == "" {
		return strings.TrimSpace(env), nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("ticket file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		os.Remove(path)
		return "", fmt.Errorf("ticket file %s: mode %v lets others read it (want 0600); removed", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	rmErr := os.Remove(path)
	if err != nil {
		return "", fmt.Errorf("ticket file: %w", err)
	}
	if rmErr != nil {
		return "", fmt.Errorf("ticket file: remove after reading: %w", rmErr)
	}
	if fromEnv {
		return "", fmt.Errorf("ticket file %s and %s both given; use one", path, runner.TicketEnv)
	}
	return strings.TrimSpace(string(b)), nil
}

func defaultStateDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return d + "/berth-runner"
	}
	return ".berth-runner"
}
