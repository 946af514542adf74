package testenv

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// Postgres returns the URL of a fresh, empty PostgreSQL database for the
// test, dropped at t.Cleanup. The first call in a test binary attaches to
// the cluster of the `go test` run the binary is part of, starting it if no
// other test binary of the run has (see pgshare.go): one throwaway cluster
// per run (initdb in a temporary directory, trust authentication, listening
// on a free port of 127.0.0.1 and a unix socket in that directory,
// durability switched off for speed), shared by every package's tests;
// later calls reuse it. A binary that `go test` did not start (run by hand,
// or a program such as envctl bench) gets a cluster of its own, as does
// every binary when BERTH_PG_SHARED=0. When the process runs as root, the
// cluster runs as the "postgres" OS user.
//
// The cluster never outlives its users: a shared cluster is watched by a
// supervisor process that stops it once no test binary of the run is
// attached and the `go test` that ran them has exited (or after 30 s
// without one); a private one gets SIGQUIT when its test binary exits, even
// if the binary is killed (parent-death signal), and the supervisor of a
// shared one likewise. Packages that use Postgres should also call
// PostgresMain from TestMain, which detaches (a private cluster: stops it
// cleanly and removes its directory):
//
//	func TestMain(m *testing.M) { testenv.PostgresMain(m) }
//
// Without the binaries (Debian's postgresql package), Postgres calls Missing.
func Postgres(t testing.TB) string {
	t.Helper()
	c, err := pgStart()
	if err != nil {
		Missing(t, "PostgreSQL", "apt-get install postgresql", err)
		return ""
	}
	return c.create(t, "")
}

// create creates a database for t, a copy of template (the server's
// template1 if ""), dropped after t (see use), and returns its URL. Names
// carry the process id: several test binaries share a cluster.
func (c *pgClusterT) create(t testing.TB, template string) string {
	t.Helper()
	name, err := c.createDB(template)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return c.use(t, name)
}

// createDB creates a database, a copy of template (template1 if "").
func (c *pgClusterT) createDB(template string) (string, error) {
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), c.next.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := "CREATE DATABASE " + name
	if template != "" {
		q += " TEMPLATE " + template
	}
	if _, err := c.admin.ExecContext(ctx, q+c.createSuffix); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, nil
}

// use gives database name to t and returns its URL. At t's cleanup the
// database is dropped in the background, with the test's connections
// forced closed: the next test need not wait for it. A failed drop fails
// the binary (StopPostgres waits for the drops and returns their errors).
func (c *pgClusterT) use(t testing.TB, name string) string {
	t.Cleanup(func() { c.dropLater(name) })
	return c.url(name)
}

func (c *pgClusterT) dropLater(name string) {
	c.drops.Add(1)
	go func() {
		defer c.drops.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := c.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			c.dropMu.Lock()
			c.dropErrs = append(c.dropErrs, fmt.Errorf("testenv: drop database %s: %w", name, err))
			c.dropMu.Unlock()
		}
	}()
}

// waitDrops waits for the background drops and returns their errors.
func (c *pgClusterT) waitDrops() error {
	c.drops.Wait()
	c.dropMu.Lock()
	defer c.dropMu.Unlock()
	return errors.Join(c.dropErrs...)
}

// PostgresMain runs the tests of m, detaches from the cluster that Postgres
// attached to (if any; a private cluster is stopped with a fast shutdown and
// its directory removed) and exits with the tests' status. Call it from
// TestMain of every package that uses Postgres.
func PostgresMain(m *testing.M) {
	code := m.Run()
	if err := StopPostgres(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// StopPostgres ends this process's use of the cluster: it drops the
// process's templates and leaves a shared cluster to its supervisor, or
// stops a private one, waits for it to exit and removes its directory. It
// is a no-op if no cluster was started, and safe to call more than once;
// Postgres must not be called afterwards.
func StopPostgres() error {
	pgMu.Lock()
	c := pgCluster
	pgCluster = nil
	pgErr = errors.New("testenv: PostgreSQL cluster already stopped")
	pgMu.Unlock()
	if c == nil {
		return nil
	}
	return c.stop()
}

var (
	pgMu      sync.Mutex
	pgCluster *pgClusterT
	pgErr     error
)

// pgClusterT is a running throwaway cluster.
type pgClusterT struct {
	// share is the run directory of a shared cluster (pgshare.go), "" for
	// a private one: cmd and exited are then nil, and stop detaches.
	share  string
	dir    string // temporary directory: data, socket, log
	port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when the postmaster has exited
	admin  *sql.DB
	next   atomic.Int64
	// drops are the databases being dropped in the background (dropLater).
	drops    sync.WaitGroup
	dropMu   sync.Mutex
	dropErrs []error
	// createSuffix ends CREATE DATABASE: " STRATEGY FILE_COPY" from
	// PostgreSQL 15 on (a plain copy of the template is faster than WAL
	// logging it when fsync is off), else "".
	createSuffix string
}

func (c *pgClusterT) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// pgStart starts the cluster on first use and returns it, or the error of the
// first attempt.
func pgStart() (*pgClusterT, error) {
	pgMu.Lock()
	defer pgMu.Unlock()
	if pgCluster != nil || pgErr != nil {
		return pgCluster, pgErr
	}
	var err error
	if run, parent, ok := pgSharedRun(); ok {
		pgCluster, err = pgAttach(run, parent)
	} else {
		pgCluster, err = pgStartClusterRetrying()
	}
	pgErr = err
	return pgCluster, err
}

// pgStartClusterRetrying starts a cluster of this process's own. A free
// port can be taken by someone else between probing and binding; a few
// attempts make that harmless.
func pgStartClusterRetrying() (c *pgClusterT, err error) {
	for attempt := 0; attempt < 3; attempt++ {
		c, err = pgStartCluster()
		if err == nil || !errors.Is(err, errPgStartFailed) {
			break
		}
	}
	return c, err
}

var errPgStartFailed = errors.New("postgres did not start")

// pgBinDir finds the directory holding initdb and postgres: the newest
// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if pgIsExec(filepath.Join(d, "initdb")) && pgIsExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if pgIsExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("no initdb and postgres in /usr/lib/postgresql/*/bin or on PATH")
}

func pgIsExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// pgCredential returns the credential to run PostgreSQL with: the postgres
// OS user when the process is root (initdb and postgres refuse to run as
// root), else nil (the current user).
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres OS user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres user has uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func pgStartCluster() (_ *pgClusterT, err error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	pgSweepStale()
	dir, err := os.MkdirTemp("", pgDirPrefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		// Only the postgres user needs the directory; MkdirTemp made it 0700.
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Env = pgEnv()
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, bytes.TrimSpace(out))
	}
	port, err := pgFreePort()
	if err != nil {
		return nil, err
	}
	c := &pgClusterT{dir: dir, port: port, exited: make(chan struct{})}
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+dir,
		// Nothing is flushed to disk (fsync, full page writes), but
		// commits stay synchronous, PostgreSQL's default: with fsync
		// off a backend's own WAL write at commit is a write(2) to the
		// page cache, while an asynchronous commit signals the WAL
		// writer (kill(2)) and wakes it for most commits, which cost
		// the lease benchmarks 12-18 % of the server's CPU per
		// acquire+release (issue 29).
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		// Shared by the test binaries of a run, two or more at a time.
		"-c", "max_connections=600",
		"-c", "shared_buffers=32MB",
		"-c", "max_wal_size=1GB",
		"-c", "log_min_messages=warning",
		"-c", "logging_collector=off",
	)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.Env = pgEnv()
	c.cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		// If the test binary dies without PostgresMain (killed, timeout
		// panic, forgotten TestMain), the kernel tells the postmaster,
		// which then shuts down immediately with its backends.
		Pdeathsig: syscall.SIGQUIT,
		Setpgid:   true,
	}
	// The parent-death signal fires when the thread that started the child
	// exits, so the child is started from an OS thread that stays alive
	// (locked, blocked in wait) for as long as the postmaster runs.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the wait
		if err := c.cmd.Start(); err != nil {
			started <- err
			close(c.exited)
			return
		}
		started <- nil
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	if err := c.waitReady(logPath); err != nil {
		_ = c.stop()
		return nil, err
	}
	return c, nil
}

// pgDirPrefix names the temporary directories of clusters.
const pgDirPrefix = "berth-pg-"

// pgSweepStale removes directories of earlier clusters whose test binary
// died before PostgresMain could remove them (a panic, a kill): older than
// ten minutes and without a live postmaster. The parent-death signal has
// already stopped their postmasters.
func pgSweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pgDirPrefix+"*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		if pid, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			first, _, _ := bytes.Cut(pid, []byte("\n"))
			if n, err := strconv.Atoi(string(bytes.TrimSpace(first))); err == nil && n > 0 && syscall.Kill(n, 0) == nil {
				continue // still running (another test binary's cluster)
			}
		}
		_ = os.RemoveAll(d)
	}
}

// pgEnv is the environment for initdb and postgres: the current one without
// PG* variables that could point them elsewhere.
func pgEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) >= 2 && kv[:2] == "PG" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

func pgFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls until the cluster accepts connections, the postmaster
// exits, or 60 s pass.
func (c *pgClusterT) waitReady(logPath string) error {
	db, err := sql.Open("pgx", c.url("postgres"))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			c.setAdmin(db)
			return nil
		}
		select {
		case <-c.exited:
			db.Close()
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%w: postmaster exited: %s", errPgStartFailed, bytes.TrimSpace(log))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			db.Close()
			return fmt.Errorf("%w within 60s: %v", errPgStartFailed, err)
		}
	}
}

// setAdmin makes db the connection pool that creates and drops databases.
func (c *pgClusterT) setAdmin(db *sql.DB) {
	db.SetMaxOpenConns(8)
	c.admin = db
	var version int
	if err := db.QueryRow("SHOW server_version_num").Scan(&version); err == nil && version >= 150000 {
		c.createSuffix = " STRATEGY FILE_COPY"
	}
}

// stop asks the postmaster for a fast shutdown (SIGINT), escalates to
// SIGKILL of its process group after 30 s, and removes the directory.
func (c *pgClusterT) stop() error {
	if c.share != "" {
		return c.detach()
	}
	var dropErr error
	if c.admin != nil {
		dropErr = c.quiesce()
		c.admin.Close()
	}
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.exited
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return errors.Join(dropErr, fmt.Errorf("testenv: remove PostgreSQL directory: %w", err))
	}
	return dropErr
}

// DropPostgresConnections makes the PostgreSQL server terminate every
// connection to the database at url but the one it asks through, as a
// server restart or a failover would, and returns how many it terminated.
func DropPostgresConnections(t testing.TB, url string) int {
	t.Helper()
	admin, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var n int
	if err := admin.QueryRowContext(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		t.Fatalf("testenv: pg_terminate_backend: %v", err)
	}
	return n
}
