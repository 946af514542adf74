package testenv

import (
	"bufio"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// One PostgreSQL cluster per `go test` run, shared by its test binaries.
//
// `go test ./...` runs each package's test binary as a child of the go
// command, so the go command's process (pid and start time) names the run.
// Its run directory, pgRunPrefix+"PID-START" under the OS temp dir, holds:
//
//	lock      flock'ed by whoever changes the directory
//	state     "PORT\nCLUSTERDIR\nSUPERVISOR-PID SUPERVISOR-START\n" once the cluster is up
//	users/PID one file per attached test binary, holding its start time
//	log       the supervisor's output
//
// The first binary to attach starts the supervisor: the same test binary
// executed again with pgSuperviseEnv set (testenv's init runs it and exits
// before any test), which starts the cluster (as a private one: the
// postmaster gets SIGQUIT if the supervisor dies), writes state, and then
// polls users/ every 100 ms. It stops the cluster and removes the run
// directory once no attached binary is alive and either the go command has
// exited or 30 s have passed without a user, and also on SIGINT, SIGTERM
// or SIGHUP. A binary attaches by adding its users/ file under the lock,
// and detaches (StopPostgres, PostgresMain) by removing it; one that dies
// without detaching is seen dead by the supervisor. So the cluster never
// outlives the run: at most one poll and a fast shutdown after the go
// command's exit.

const (
	pgRunPrefix    = "berth-pgrun-"               // not pgDirPrefix+"*": pgSweepStale must not match it
	pgSuperviseEnv = "BERTH_TESTENV_PG_SUPERVISE" // the run directory
	pgParentEnv    = "BERTH_TESTENV_PG_PARENT"    // "PID START" of the go command
	pgIdleLimit    = 30 * time.Second
	// pgRunEnv, "RUNDIR:PID START", names the run in place of the parent
	// go command, for TestPostgresIsSharedByTheRun's helper processes.
	pgRunEnv = "BERTH_TESTENV_PG_RUN"
)

func init() {
	if run := os.Getenv(pgSuperviseEnv); run != "" {
		os.Exit(pgSupervise(run, os.Getenv(pgParentEnv)))
	}
}

// procID names a process across pid reuse: its pid and its start time in
// clock ticks since boot (/proc/PID/stat field 22).
type procID struct {
	pid   int
	start string
}

func (p procID) String() string { return strconv.Itoa(p.pid) + " " + p.start }

func parseProcID(s string) (procID, bool) {
	pid, start, ok := strings.Cut(strings.TrimSpace(s), " ")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || n <= 0 || start == "" {
		return procID{}, false
	}
	return procID{n, start}, true
}

// procOf returns pid's procID; false if there is no such process or it is a
// zombie.
func procOf(pid int) (procID, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procID{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procID{}, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return procID{}, false
	}
	return procID{pid, f[19]}, true
}

// alive reports whether the process p names still runs.
func (p procID) alive() bool {
	q, ok := procOf(p.pid)
	return ok && q.start == p.start
}

// pgSharedRun returns the run directory of the `go test` run this process
// is a test binary of, and the go command's procID; false when the parent
// is not a go command (a binary run by hand, envctl bench, a test's child)
// or BERTH_PG_SHARED=0.
func pgSharedRun() (string, procID, bool) {
	if os.Getenv("BERTH_PG_SHARED") == "0" || !testing.Testing() {
		return "", procID{}, false
	}
	if run, parent, ok := strings.Cut(os.Getenv(pgRunEnv), ":"); ok { // testenv's own test
		p, ok := parseProcID(parent)
		return run, p, ok
	}
	ppid := os.Getppid()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(ppid) + "/exe")
	if err != nil || filepath.Base(exe) != "go" {
		return "", procID{}, false
	}
	parent, ok := procOf(ppid)
	if !ok {
		return "", procID{}, false
	}
	return filepath.Join(os.TempDir(), pgRunPrefix+strconv.Itoa(parent.pid)+"-"+parent.start), parent, true
}

// pgLockRun creates run if needed and takes its lock. A lock taken on a
// lock file that its supervisor removed meanwhile (the run ended) is
// dropped and taken again on a new directory.
func pgLockRun(run string) (unlock func(), err error) {
	for {
		if err := os.MkdirAll(filepath.Join(run, "users"), 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(run, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(filepath.Join(run, "lock"))
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return func() { f.Close() }, nil // closing releases the lock
		}
		f.Close()
	}
}

type pgState struct {
	port  int
	dir   string
	super procID
}

func pgReadState(run string) (pgState, bool) {
	b, err := os.ReadFile(filepath.Join(run, "state"))
	if err != nil {
		return pgState{}, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 3 {
		return pgState{}, false
	}
	port, err := strconv.Atoi(lines[0])
	super, ok := parseProcID(lines[2])
	if err != nil || !ok {
		return pgState{}, false
	}
	return pgState{port: port, dir: lines[1], super: super}, true
}

// pgAttach attaches this test binary to the run's cluster, starting its
// supervisor (and so the cluster) if it has none.
func pgAttach(run string, parent procID) (_ *pgClusterT, err error) {
	pgSweepStaleRuns()
	me, ok := procOf(os.Getpid())
	if !ok {
		return nil, errors.New("testenv: cannot read this process's start time")
	}
	unlock, err := pgLockRun(run)
	if err != nil {
		return nil, fmt.Errorf("testenv: PostgreSQL run directory: %w", err)
	}
	defer unlock()
	userFile := filepath.Join(run, "users", strconv.Itoa(me.pid))
	if err := os.WriteFile(userFile, []byte(me.start), 0o600); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.Remove(userFile)
		}
	}()
	st, ok := pgReadState(run)
	if !ok || !st.super.alive() {
		os.Remove(filepath.Join(run, "state"))
		if st, err = pgStartSupervisor(run, parent); err != nil {
			return nil, err
		}
	}
	c := &pgClusterT{share: run, dir: st.dir, port: st.port}
	db, err := sql.Open("pgx", c.url("postgres"))
	if err != nil {
		return nil, err
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: the run's cluster on port %d: %v", errPgStartFailed, st.port, err)
	}
	c.setAdmin(db)
	return c, nil
}

// pgStartSupervisor starts the run's supervisor (this executable again) and
// waits for its word that the cluster is up.
func pgStartSupervisor(run string, parent procID) (pgState, error) {
	exe, err := os.Executable()
	if err != nil {
		return pgState{}, err
	}
	logf, err := os.OpenFile(filepath.Join(run, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return pgState{}, err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return pgState{}, err
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), pgSuperviseEnv+"="+run, pgParentEnv+"="+parent.String())
	// Its own output, never the test binary's: go test waits for the
	// test binary's output to close.
	cmd.Stdout, cmd.Stderr = w, logf
	cmd.Dir = "/"
	err = cmd.Start()
	w.Close()
	if err != nil {
		return pgState{}, fmt.Errorf("testenv: start the PostgreSQL supervisor: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reaped here if it ends while this binary runs
	line, _ := bufio.NewReader(r).ReadString('\n')
	if line != "ok\n" {
		log, _ := os.ReadFile(filepath.Join(run, "log"))
		if strings.HasPrefix(line, "error ") {
			return pgState{}, errors.New(strings.TrimSpace(strings.TrimPrefix(line, "error ")))
		}
		return pgState{}, fmt.Errorf("%w: the supervisor exited: %s", errPgStartFailed, strings.TrimSpace(string(log)))
	}
	st, ok := pgReadState(run)
	if !ok {
		return pgState{}, fmt.Errorf("%w: the supervisor wrote no state", errPgStartFailed)
	}
	return st, nil
}

// pgSupervise is the supervisor's main: see the comment at the top.
func pgSupervise(run, parentArg string) int {
	parent, ok := parseProcID(parentArg)
	if !ok {
		fmt.Println("error testenv: bad " + pgParentEnv)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	c, err := pgStartClusterRetrying()
	if err != nil {
		fmt.Println("error " + strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	me, _ := procOf(os.Getpid())
	state := fmt.Sprintf("%d\n%s\n%s\n", c.port, c.dir, me)
	tmp := filepath.Join(run, "state.tmp")
	err = os.WriteFile(tmp, []byte(state), 0o600)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(run, "state"))
	}
	if err != nil {
		_ = c.stop()
		fmt.Println("error " + err.Error())
		return 1
	}
	fmt.Println("ok")
	os.Stdout.Close()

	end := func(code int) int {
		if err := c.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
		os.RemoveAll(run)
		return code
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var idleSince time.Time
	for {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "testenv: %v: stopping the run's PostgreSQL\n", s)
			unlock, err := pgLockRun(run)
			code := end(1)
			if err == nil {
				unlock()
			}
			return code
		case <-c.exited:
			fmt.Fprintln(os.Stderr, "testenv: the run's postmaster exited")
			os.RemoveAll(run)
			return 1
		case <-tick.C:
		}
		if pgLiveUsers(run) > 0 {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if parent.alive() && time.Since(idleSince) < pgIdleLimit {
			continue
		}
		unlock, err := pgLockRun(run)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return end(1)
		}
		if pgLiveUsers(run) > 0 { // one attached meanwhile
			unlock()
			idleSince = time.Time{}
			continue
		}
		code := end(0)
		unlock()
		return code
	}
}

// pgLiveUsers counts the attached binaries that still run, removing the
// files of those that died without detaching.
func pgLiveUsers(run string) int {
	ents, _ := os.ReadDir(filepath.Join(run, "users"))
	n := 0
	for _, e := range ents {
		p := filepath.Join(run, "users", e.Name())
		b, err := os.ReadFile(p)
		pid, perr := strconv.Atoi(e.Name())
		if err == nil && perr == nil && (procID{pid, strings.TrimSpace(string(b))}).alive() {
			n++
			continue
		}
		os.Remove(p)
	}
	return n
}

// pgSweepStaleRuns removes the run directories of runs whose go command and
// supervisor are both gone (a supervisor killed with SIGKILL: its postmaster
// got SIGQUIT; pgSweepStale removes the cluster's directory).
func pgSweepStaleRuns() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pgRunPrefix+"*"))
	for _, d := range dirs {
		pid, start, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), pgRunPrefix), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || (procID{n, start}).alive() {
			continue
		}
		if st, ok := pgReadState(d); ok && st.super.alive() {
			continue
		}
		os.RemoveAll(d)
	}
}

// detach ends this binary's use of a shared cluster: it waits for the
// background drops, drops the binary's templates and their unused copies,
// closes its connections and removes its users/ file. The supervisor stops
// the cluster when the run is over.
func (c *pgClusterT) detach() error {
	errs := []error{c.quiesce()}
	pgTemplates.Range(func(_, v any) bool {
		tp := v.(*pgTemplate)
		close(tp.spare)
		for name := range tp.spare {
			if _, err := c.admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
				errs = append(errs, fmt.Errorf("testenv: drop database %s: %w", name, err))
			}
		}
		if tp.name != "" {
			if _, err := c.admin.Exec("DROP DATABASE IF EXISTS " + tp.name + " WITH (FORCE)"); err != nil {
				errs = append(errs, fmt.Errorf("testenv: drop template %s: %w", tp.name, err))
			}
		}
		return true
	})
	c.admin.Close()
	if err := os.Remove(filepath.Join(c.share, "users", strconv.Itoa(os.Getpid()))); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// quiesce waits for the copies being made ahead and then for the drops in
// the background, and returns the drops' errors.
func (c *pgClusterT) quiesce() error {
	pgTemplates.Range(func(_, v any) bool {
		v.(*pgTemplate).making.Wait()
		return true
	})
	return c.waitDrops()
}

// pgTemplate is a database that PostgresFrom copies.
type pgTemplate struct {
	once sync.Once
	name string // set once prepared
	ok   bool
	// spare holds copies made ahead, while the tests run (pgSpares at
	// most); making counts those being made.
	spare  chan string
	making sync.WaitGroup
}

// pgSpares is how many copies of a template are made ahead of the tests
// that take them: creating a database is most of a store test's time.
const pgSpares = 2

var pgTemplates sync.Map // key -> *pgTemplate

// PostgresFrom is Postgres for a database that starts as a copy of one
// prepared once per test binary and key: the first call creates an empty
// database, calls prepare with its URL (for example to open and migrate a
// store, or to load a dump), and keeps it as a template; every call
// returns a fresh copy of it (CREATE DATABASE ... TEMPLATE), dropped after
// the test. Copies are made ahead of the calls that take them. prepare
// must close every connection it opened. A prepare that fails the test
// fails every later call of the same key too.
func PostgresFrom(t testing.TB, key string, prepare func(t testing.TB, url string)) string {
	t.Helper()
	c, err := pgStart()
	if err != nil {
		Missing(t, "PostgreSQL", "apt-get install postgresql", err)
		return ""
	}
	v, _ := pgTemplates.LoadOrStore(key, &pgTemplate{spare: make(chan string, pgSpares)})
	tp := v.(*pgTemplate)
	tp.once.Do(func() {
		name := fmt.Sprintf("template_%d_%d", os.Getpid(), c.next.Add(1))
		if _, err := c.admin.Exec("CREATE DATABASE " + name + c.createSuffix); err != nil {
			t.Fatalf("testenv: create template %s: %v", name, err)
		}
		tp.name = name
		prepare(t, c.url(name))
		tp.ok = !t.Failed()
		if tp.ok {
			for range pgSpares - 1 {
				c.makeSpare(tp)
			}
		}
	})
	if !tp.ok {
		t.Fatalf("testenv: the PostgreSQL template %q was not prepared (see the test that prepared it)", key)
	}
	var name string
	select {
	case name = <-tp.spare:
	default:
		if name, err = c.createDB(tp.name); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	c.makeSpare(tp)
	return c.use(t, name)
}

// makeSpare makes a copy of tp in the background for a later PostgresFrom;
// a copy that fails is left to the call that takes none (it creates its
// own and reports its error).
func (c *pgClusterT) makeSpare(tp *pgTemplate) {
	tp.making.Add(1)
	go func() {
		defer tp.making.Done()
		name, err := c.createDB(tp.name)
		if err != nil {
			return
		}
		select {
		case tp.spare <- name:
		default:
			c.dropLater(name) // enough spares already
		}
	}()
}
