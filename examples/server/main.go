// Command server is a host service over berth: an HTTP JSON API (and its
// OpenAPI document at /api/openapi.json) for the Environments settings of
// the instance, written as an adopter embeds berth in a Go service.
//
//	go run ./examples/server                     # 127.0.0.1:8080, SQLite under the user's state directory
//	go run ./examples/server -store postgres://berth@db/berth -listen :8443 -tls-cert c.pem -tls-key k.pem
//
// On its first start it creates the instance administrator and prints a
// one-time login link (valid 15 minutes, once) on stderr. -tokens FILE maps
// bearer tokens to principals: {"tokens": [{"token": "…", "role":
// "board_member", "id": "bob", "companies": ["acme"]}]}; one (role, id)
// has one grant, and the file is read again on SIGHUP and when it
// changes. The server keeps its users and sessions in tables of its own,
// in the same database, through its own migrations. A session follows the
// credential that made it (a token gone or changed ends it), ends when
// idle (-session-idle) and is listed and revoked by instance admins
// (/api/v1/sessions); `server login-link -data DIR` prints a fresh
// one-time link. Runs are capped per company and per principal
// (-max-runs-per-company, -max-runs-per-principal), each has a deadline
// (-run-timeout) and is forgotten after -run-retention. Runs live in the
// server's tables: the replica running one holds a claim on it
// (-run-claim), and when the claim lapses (a replica killed, or a
// restart) another replica reattaches the run's task (-runner-dir, shared
// by replicas, holds the runners' output and signing key); the server
// sweeps, keeps the warm pools and measures provider health every
// -sweep-interval, one replica at a time.
//
// The operator's page is Settings → Environments at
// /company/settings/instance/environments: server-rendered (assets embedded
// from assets/), its forms calling the same /api/v1 with the session's CSRF
// token, its controls shown only where the library's authorizer allows them
// (a board member sees the redacted view and no mutation control, an agent
// gets no page). Secret fields are write-only: the page shows "set (version
// N)", never a value. Errors have one shape, {"error": {"code", "reason",
// "message", "detail", "field", "target"}} (docs/server.md); a required
// secret left out is the code invalid with the reason missing_credentials
// on its field (config.NAME).
//
// Custom images (UI-4): /api/v1/environments/{id}/templates and
// /template-history, /api/v1/templates/{id}/promote|rollback|revoke,
// setup sessions at /api/v1/environments/{id}/setup-sessions (POST starts
// a scripted or interactive one in the background and answers 202 once it
// is recorded) and /api/v1/setup-sessions/{id} with /events?after=CURSOR,
// /capture ({"promote": true}), /cancel and /terminal-token; the terminal
// is the library's WebSocket handler at /api/v1/setup-sessions/{id}/terminal
// behind the server's authentication (the token is bound to the caller and
// to that path; only the server's own origin may connect). The page's
// images panel drives them; its terminal is xterm.js 3.8.1 from Debian's
// node-xterm (-xterm-dir, bundled by the server: see xterm.go), or a plain
// line terminal when -xterm-dir is empty.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/runnerbin"
)

// RunnerBinaryEnv names a runner binary to use instead of building one
// from the module's source (as envctl reads it).
const RunnerBinaryEnv = "BERTH_RUNNER_BINARY"

// flagValues are the server's flags.
type flagValues struct {
	listen, data, store, drivers string
	plugins                      string
	testMode                     bool
	tokens                       string
	tlsCert, tlsKey              string
	shutdownTimeout              time.Duration
	maxStreams                   int
	xtermDir                     string
	runnerDir                    string
	sessionIdle                  time.Duration
	limits                       limits
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "login-link" {
		if err := loginLinkCommand(ctx, os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "server login-link:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// defaultDataDir is the data directory under the user's state directory.
func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "berth-server")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "berth-server")
	}
	return "berth-server"
}

// parseFlags reads the command line.
func parseFlags(args []string, stderr io.Writer) (*flagValues, error) {
	c := &flagValues{}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address to listen on (off loopback only with -tls-cert and -tls-key)")
	fs.StringVar(&c.data, "data", defaultDataDir(), "data directory (the SQLite database and the demo secret store)")
	fs.StringVar(&c.store, "store", "", "postgres://… URL of a PostgreSQL database (default: SQLite in -data)")
	fs.StringVar(&c.drivers, "drivers", "local,ssh,docker", "drivers to enable: local, ssh, docker, daytona, kubernetes, fake (fake only with -test-mode)")
	fs.StringVar(&c.plugins, "plugins", "", "load the driver plugins that DIR's pins file lists (drivers/plugin; a plugin replaces the driver of its name)")
	fs.BoolVar(&c.testMode, "test-mode", false, "allow test-only drivers (fake) as working targets")
	fs.StringVar(&c.tokens, "tokens", "", "JSON file mapping bearer tokens to principals")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "TLS certificate file")
	fs.StringVar(&c.tlsKey, "tls-key", "", "TLS key file")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long shutdown waits for requests and runs")
	fs.IntVar(&c.maxStreams, "max-streams", 8, "open event streams per credential (a bearer token, or the token or login link a session was made from)")
	fs.StringVar(&c.xtermDir, "xterm-dir", defaultXTermDir(), "directory of Debian's node-xterm (libjs-xterm's modules, lib/) for the page's terminal; empty: a plain line terminal")
	fs.DurationVar(&c.sessionIdle, "session-idle", defaultSessionIdle, "end a cookie session unused this long (beside its 12 h cap)")
	fs.IntVar(&c.limits.maxRunsPerCompany, "max-runs-per-company", 8, "runs in flight per company (more are refused with 429)")
	fs.IntVar(&c.limits.maxRunsPerPrincipal, "max-runs-per-principal", 4, "runs in flight per principal (more are refused with 429)")
	fs.DurationVar(&c.limits.runTimeout, "run-timeout", 15*time.Minute, "deadline of a run that names no timeoutSeconds (at most 1h)")
	fs.DurationVar(&c.limits.runRetention, "run-retention", 24*time.Hour, "how long an ended run stays readable")
	fs.StringVar(&c.runnerDir, "runner-dir", "", "the runners' directory: their output and the key their tokens are signed with (default: runners in -data); replicas share one, so that any of them takes a run over and reads its output")
	fs.DurationVar(&c.limits.runClaimTTL, "run-claim", 30*time.Second, "how long a replica's claim on a run it holds lasts without a heartbeat; once lapsed, another replica's sweep takes the run over")
	fs.DurationVar(&c.limits.sweepInterval, "sweep-interval", time.Minute, "period of the sweep, pool maintenance and health checks (jittered; one replica at a time; 0: none)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case c.sessionIdle <= 0:
		return nil, errors.New("-session-idle must be positive")
	case c.limits.maxRunsPerCompany <= 0 || c.limits.maxRunsPerPrincipal <= 0:
		return nil, errors.New("-max-runs-per-company and -max-runs-per-principal must be positive")
	case c.limits.runTimeout <= 0 || c.limits.runTimeout > maxRunTimeout:
		return nil, fmt.Errorf("-run-timeout %s: want more than 0 and at most %s", c.limits.runTimeout, maxRunTimeout)
	case c.limits.runRetention <= 0:
		return nil, errors.New("-run-retention must be positive")
	case c.limits.runClaimTTL < 3*time.Second:
		return nil, errors.New("-run-claim must be at least 3s")
	case c.limits.sweepInterval < 0:
		return nil, errors.New("-sweep-interval must not be negative")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	if err := checkListen(c.listen, c.tlsCert != ""); err != nil {
		return nil, err
	}
	return c, nil
}

// checkListen refuses an address off loopback without TLS.
func checkListen(addr string, tls bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", addr, err)
	}
	if tls {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-listen %q is not a loopback address: serving off loopback needs -tls-cert and -tls-key", addr)
}

// runnerSet is the runner of the server's runs: $BERTH_RUNNER_BINARY, or
// built from the module's source for the target's architecture (as envctl
// does; once per source and architecture, into the user's cache).
func runnerSet(log *slog.Logger) (*drivers.RunnerSet, error) {
	if bin := os.Getenv(RunnerBinaryEnv); bin != "" {
		spec, err := runnerbin.Spec(bin)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", RunnerBinaryEnv, err)
		}
		return drivers.RunnerSetOf(spec), nil
	}
	o := &runnerbin.Options{Progress: func(msg string) { log.Info("runner build", "progress", msg) }}
	return &drivers.RunnerSet{Build: func(ctx context.Context, arch string) (drivers.RunnerSpec, error) {
		bin, err := runnerbin.Binary(ctx, arch, o)
		if err != nil {
			return drivers.RunnerSpec{}, fmt.Errorf("no runner binary: set $%s, or run the server from the module's source: %w", RunnerBinaryEnv, err)
		}
		return runnerbin.Spec(bin)
	}}, nil
}

// run starts the server and serves until ctx ends, then shuts down:
// stop accepting, finish or cancel requests within the deadline, stop the
// runs' tasks with proof and release their leases, close the System and
// the database. ready, if not nil, gets the listening address.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	tokens, err := newTokenSource(c.tokens, log.Info)
	if err != nil {
		return err
	}
	names := strings.Split(c.drivers, ",")
	drvs, err := driversNamed(names, c.testMode, log)
	if err != nil {
		return err
	}
	if c.plugins != "" {
		if drvs, err = withPlugins(drvs, c.plugins, log); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.data, 0o700); err != nil {
		return fmt.Errorf("-data: %w", err)
	}
	dsn := c.store
	if dsn == "" {
		dsn = filepath.Join(c.data, "berth.db")
	}
	stores, host, closeDB, err := openStores(ctx, dsn)
	if err != nil {
		return err
	}
	defer closeDB()
	secrets, err := secretfile.Open(ctx, filepath.Join(c.data, "secrets"))
	if err != nil {
		return err
	}
	rset, err := runnerSet(log)
	if err != nil {
		return err
	}
	rdir := c.runnerDir
	if rdir == "" {
		rdir = filepath.Join(c.data, "runners")
	}
	if err := os.MkdirAll(rdir, 0o700); err != nil {
		return fmt.Errorf("-runner-dir: %w", err)
	}
	key, err := runnerKey(filepath.Join(rdir, "signing.key"))
	if err != nil {
		return err
	}
	s, err := newServer(ctx, options{
		runnerDir: filepath.Join(rdir, "output"), runnerKey: key,
		stores: stores, host: host, drivers: drvs, testMode: c.testMode, tokenFile: tokens,
		sessionIdle: c.sessionIdle, limits: c.limits, log: log, tls: c.tlsCert != "", runnerSet: rset, maxStreams: c.maxStreams, secrets: secrets,
		xtermDir: c.xtermDir,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		s.Close(context.Background())
		return err
	}
	scheme := "http"
	if c.tlsCert != "" {
		scheme = "https"
	}
	if link, err := host.ensureAdmin(ctx, time.Now()); err != nil {
		ln.Close()
		s.Close(context.Background())
		return err
	} else if link != "" {
		fmt.Fprintf(stderr, "server: log in as the instance administrator (valid %s, once): %s://%s/login?link=%s\n",
			loginLinkTTL, scheme, ln.Addr(), link)
	} else {
		fmt.Fprintf(stderr, "server: the administrator has logged in before; `server login-link -data %s` prints a fresh one-time link\n", c.data)
	}
	hs := newHTTPServer(s.Handler())
	hs.RegisterOnShutdown(s.beginShutdown)
	errc := make(chan error, 1)
	go func() {
		if c.tlsCert != "" {
			errc <- hs.ServeTLS(ln, c.tlsCert, c.tlsKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	log.Info("listening", "address", scheme+"://"+ln.Addr().String())
	// SIGHUP reads the -tokens file again (so does a change of its
	// modification time, seen at the next request).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if err := tokens.reload(); err != nil {
				log.Error("SIGHUP: tokens file not read", "error", err.Error())
			}
		}
	}()
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		s.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	herr := hs.Shutdown(sctx)
	if herr != nil {
		hs.Close() // cancel what did not finish in time
	}
	return errors.Join(s.Close(sctx), ignoreClosed(herr))
}

// loginLinkCommand is `server login-link [-data DIR | -store URL]
// [-listen ADDR] [-tls]`: it prints a fresh one-time login link of the
// instance administrator (valid 15 minutes, once) on stdout, for an
// administrator who lost the session after the first login. It writes
// to the server's tables only (a running server need not stop).
func loginLinkCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server login-link", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultDataDir(), "the server's data directory (its SQLite database)")
	store := fs.String("store", "", "postgres://… URL of the server's PostgreSQL database (default: SQLite in -data)")
	listen := fs.String("listen", "127.0.0.1:8080", "the server's -listen address, for the link")
	tlsOn := fs.Bool("tls", false, "the server serves TLS (an https:// link)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	dsn := *store
	if dsn == "" {
		dsn = filepath.Join(*data, "berth.db")
		if _, err := os.Stat(dsn); err != nil {
			return fmt.Errorf("-data %s: no server database here (%w); start the server once first", *data, err)
		}
	}
	_, host, closeDB, err := openStores(ctx, dsn)
	if err != nil {
		return err
	}
	defer closeDB()
	now := time.Now()
	if err := host.createAdmin(ctx, now); err != nil {
		return err
	}
	link, err := host.newLoginLink(ctx, now)
	if err != nil {
		return err
	}
	scheme := "http"
	if *tlsOn {
		scheme = "https"
	}
	_, err = fmt.Fprintf(stdout, "%s://%s/login?link=%s\n", scheme, *listen, link)
	return err
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// newHTTPServer bounds headers, idle connections and header sizes; writes
// are not bounded (event streams), each request's body is (maxBody).
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// runnerKey reads the runners' signing key from path, made (32 random
// bytes, mode 0600) when there is none: a restarted server, and every
// replica sharing the data directory, verify the tokens of the runners
// another process launched.
func runnerKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b = make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return runnerKey(path) // another replica made it first
		}
		if err != nil {
			return nil, fmt.Errorf("server: the runners' signing key %s: %w", path, err)
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			return nil, fmt.Errorf("server: the runners' signing key %s: %w", path, err)
		}
		return b, f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("server: the runners' signing key %s: %w", path, err)
	}
	if len(b) < 32 {
		return nil, fmt.Errorf("server: the runners' signing key %s has %d bytes, want 32 (remove it to make a new one)", path, len(b))
	}
	return b, nil
}

// runnerSpecOf reads a runner binary's spec.
func runnerSpecOf(path string) (drivers.RunnerSpec, error) {
	return runnerbin.Spec(path)
}
