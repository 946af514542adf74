package ssh

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/qualification"
)

// How the runner is hosted on an SSH server (drivers.RunnerHost).
//
// The binary is uploaded once per SHA-256 to
// $HOME/.cache/berth/runner/<sha256> (directory mode 0700): a file that is
// there with the right sum is used as it is; otherwise the binary goes over
// the pooled connection on a command's standard input into a temporary name,
// its sum is checked on the server (sha256sum, else busybox sha256sum) and
// only then is it renamed into place. The uploaded binary stays after the
// lease (later leases with the same sum copy nothing); an operator removes
// the directory to reclaim the space.
//
// The ingress is opened before anything is uploaded. It is a remote
// forward (streamlocal-forward@openssh.com) of the socket
// /tmp/berth-<uid>/<lease key>/prp.sock, in directories of mode 0700
// owned by the login user. A server that refuses to forward unix sockets
// (Dropbear forwards TCP only; OpenSSH with AllowStreamLocalForwarding no)
// gets a TCP remote forward (tcpip-forward) bound to its loopback,
// 127.0.0.1 with a port the server picks, and the runner's endpoint is
// http://127.0.0.1:PORT. That adds no trust: other users of the host can
// connect to the port, but every runner connection is authenticated by
// its one-use ticket and then its token, so they reach no session. A
// server that refuses both makes HostRunner fail with an error wrapping
// drivers.ErrUnsupported that names what was refused. The path (or port)
// is fixed for the lease: when the
// pooled connection breaks, the ingress redials it (through the pool, as a
// command would) and opens the forward again at the same path, after
// removing the socket file the old forward left behind (sshd's default
// StreamLocalBindUnlink no keeps it, and the next bind would fail with
// "Address already in use"); a TCP forward asks for the same port again. Runners' state directories are in the same
// lease directory. The lease key is derived from the berth lease id
// (leaseDirKey), so that a session another process opens for the same
// lease (the lease manager's Open after the host restarted) has the same
// lease directory: the same state directory, and the same socket path, at
// which a runner launched by the first process reconnects by itself. A TCP
// forward's address is recorded in the lease directory (tcpAddrFile), and
// the first forward of a later session asks for that port again (falling
// back to a port the server picks when it is taken: a runner launched by
// a process that is gone then cannot reach this one). Launch marks the runner's environment (driverkit.RunnerMarkEnv,
// inherited by its tasks); Release ends every marked process of the login
// user (SIGTERM, then SIGKILL) and removes the lease directory.

// ingressSocketName is the socket's name in the lease directory.
const ingressSocketName = "prp.sock"

// sumFunc is a POSIX shell function printing the SHA-256 of "$1".
const sumFunc = `sum256() { if command -v sha256sum >/dev/null 2>&1; then set -- $(sha256sum "$1"); ` +
	`elif command -v busybox >/dev/null 2>&1; then set -- $(busybox sha256sum "$1"); ` +
	`else echo "neither sha256sum nor busybox is installed" >&2; return 4; fi; printf '%s' "$1"; }; `

// runnerCheckScript prints the server's machine (uname -m), then "present
// PATH" when the runner of sum is installed with that sum, else "missing
// PATH", on one line.
func runnerCheckScript(sum string) string {
	return sumFunc + `f="$HOME/.cache/berth/runner/` + sum + `"; m=$(uname -m 2>/dev/null) || m=unknown; ` +
		`if [ -f "$f" ] && [ ! -L "$f" ] && [ -x "$f" ] && [ "$(sum256 "$f")" = ` + sum + ` ]; ` +
		`then printf '%s present %s\n' "${m:-unknown}" "$f"; else printf '%s missing %s\n' "${m:-unknown}" "$f"; fi`
}

// machines maps uname -m to the ELF machine of binaries that run there.
var machines = map[string]elf.Machine{
	"x86_64": elf.EM_X86_64, "amd64": elf.EM_X86_64,
	"aarch64": elf.EM_AARCH64, "arm64": elf.EM_AARCH64,
	"armv6l": elf.EM_ARM, "armv7l": elf.EM_ARM, "armv8l": elf.EM_ARM,
	"i386": elf.EM_386, "i486": elf.EM_386, "i586": elf.EM_386, "i686": elf.EM_386,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "ppc64": elf.EM_PPC64,
	"s390x": elf.EM_S390, "loongarch64": elf.EM_LOONGARCH,
}

// runnerUploadScript writes standard input to a temporary name, checks its
// sum and renames it into place; it prints the binary's path.
func runnerUploadScript(sum string) string {
	return `umask 077; ` + sumFunc + `d="$HOME/.cache/berth/runner"; f="$d/` + sum + `"; ` +
		`mkdir -p "$d" && chmod 700 "$d" || exit 3; ` +
		`t="$f.tmp.$$"; cat > "$t" || { rm -f "$t"; exit 3; }; ` +
		`s=$(sum256 "$t"); if [ "$s" != ` + sum + ` ]; then rm -f "$t"; echo "the uploaded file has sha256 ${s:-unknown}, want ` + sum + `" >&2; exit 5; fi; ` +
		`chmod 700 "$t" && mv -f "$t" "$f" || { rm -f "$t"; exit 3; }; ` +
		`printf '%s\n' "$f"`
}

// leaseDirScript makes the lease directory /tmp/berth-<uid>/<nonce> (mode
// 0700; the parent must be a directory of the login user, not a link),
// removes a stale socket in it and prints its path.
func leaseDirScript(nonce string) string {
	return `b="/tmp/berth-$(id -u)"; mkdir -m 700 "$b" 2>/dev/null; ` +
		`if [ ! -d "$b" ] || [ -L "$b" ] || [ ! -O "$b" ]; then echo "$b is not a directory of the login user" >&2; exit 3; fi; ` +
		`chmod 700 "$b" || exit 3; d="$b/` + nonce + `"; ` +
		`if [ ! -d "$d" ]; then mkdir -m 700 "$d" || exit 3; fi; ` +
		`rm -f "$d/` + ingressSocketName + `" && printf '%s\n' "$d"`
}

// newNonce returns 16 random hex digits: a session's command tags.
func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// leaseDirKey returns the name of the lease directory of berth lease id
// (runner.go's notes): 16 hex digits of its SHA-256, so that a session
// another process opens for the same lease (lease.Manager.Open after a
// restart) finds the runner state and ingress path of the first; for no
// lease id, random ones.
func leaseDirKey(leaseID string) string {
	if leaseID == "" {
		return newNonce()
	}
	return shortHash("lease-dir\x00" + leaseID)
}

// shortHash returns 16 hex digits of the SHA-256 of s: a file name for a
// lease id of any content.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// HostRunner opens the ingress, then uploads the runner of spec unless the
// server holds a file of its SHA-256 already (see the package's runner
// notes). The ingress is a remote forward of a unix socket at a path fixed
// for the lease or, where the server refuses that, of a TCP port on the
// server's loopback; it is re-opened at the same path (port) whenever the
// pooled connection is redialed. A server that forwards neither is an
// error wrapping drivers.ErrUnsupported, returned before any upload.
// spec.Binary is read on the berth host; its sum must be spec.SHA256. One
// ingress at a time per lease.
func (sb *sandbox) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ssh %s: host runner: %w", sb.id, err)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("ssh %s: host runner: %w", sb.id, err)
	}
	sb.runnerMu.Lock()
	defer sb.runnerMu.Unlock()
	// Under runnerMu: Release marks the lease released before it takes
	// runnerMu to close the ingress, so nothing opened here outlives it.
	sb.mu.Lock()
	released := sb.released
	sb.mu.Unlock()
	if released {
		return nil, sb.errReleased()
	}
	if sb.ingress != nil {
		return nil, fmt.Errorf("ssh %s: host runner: an ingress is already open", sb.id)
	}
	res, err := sb.run(ctx, sb.c.command(leaseDirScript(sb.dirKey)), drivers.Command{OutputLimit: 8 << 10})
	if err != nil {
		return nil, fmt.Errorf("ssh %s: host runner: lease directory: %w", sb.id, err)
	}
	dir := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || !strings.HasPrefix(dir, "/") {
		return nil, fmt.Errorf("ssh %s: host runner: lease directory: exit %d: %s", sb.id, res.ExitCode, clip(res.Stderr))
	}
	sb.leaseDir = dir
	in := &ingress{
		sb: sb, dir: dir, sock: dir + "/" + ingressSocketName,
		conns: make(chan net.Conn), done: make(chan struct{}),
	}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	ln, err := in.listen(ctx)
	if err != nil {
		in.cancel()
		return nil, fmt.Errorf("ssh %s: host runner: forward: %w", sb.id, err)
	}
	in.ln = ln
	in.wg.Add(1)
	go in.serve(ln)
	sb.ingress = in
	binary, err := sb.installRunner(ctx, spec)
	if err != nil {
		sb.runnerMu.Unlock()
		_ = in.Close()
		sb.runnerMu.Lock()
		return nil, err
	}
	in.mu.Lock()
	in.binary = binary
	in.mu.Unlock()
	sb.d.log.Debug("ssh runner ingress open", "id", sb.id, "endpoint", in.Endpoint())
	return in, nil
}

// installRunner makes sure the server holds the runner of spec and returns
// its path there.
func (sb *sandbox) installRunner(ctx context.Context, spec drivers.RunnerSpec) (string, error) {
	f, machine, err := openRunner(spec)
	if err != nil {
		return "", fmt.Errorf("ssh %s: host runner: %w", sb.id, err)
	}
	defer f.Close()
	res, err := sb.run(ctx, sb.c.command(runnerCheckScript(spec.SHA256)), drivers.Command{OutputLimit: 8 << 10})
	if err != nil {
		return "", fmt.Errorf("ssh %s: host runner: check the installed runner: %w", sb.id, err)
	}
	arch, rest, _ := strings.Cut(strings.TrimSpace(string(res.Stdout)), " ")
	state, path, _ := strings.Cut(rest, " ")
	if res.ExitCode != 0 || !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("ssh %s: host runner: check the installed runner: exit %d: %s", sb.id, res.ExitCode, clip(res.Stderr))
	}
	if want, known := machines[arch]; known && want != machine {
		return "", fmt.Errorf("ssh %s: host runner: runner spec: binary %q is built for %s, the server is %s: %w", sb.id, spec.Binary, machine, arch, drivers.ErrUnsupported)
	}
	if state == "present" {
		return path, nil
	}
	sb.d.uploads.Add(1)
	res, err = sb.run(ctx, sb.c.command(runnerUploadScript(spec.SHA256)), drivers.Command{Stdin: f, OutputLimit: 8 << 10})
	if err != nil {
		return "", fmt.Errorf("ssh %s: host runner: upload %s: %w", sb.id, spec.Binary, err)
	}
	path = strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("ssh %s: host runner: upload %s: exit %d: %s", sb.id, spec.Binary, res.ExitCode, clip(res.Stderr))
	}
	sb.d.log.Debug("ssh runner uploaded", "id", sb.id, "path", path)
	return path, nil
}

// openRunner opens spec.Binary after checking that it is a regular ELF
// file whose SHA-256 is spec.SHA256, and returns it at offset 0 with its
// machine.
func openRunner(spec drivers.RunnerSpec) (*os.File, elf.Machine, error) {
	f, err := os.Open(spec.Binary)
	if err != nil {
		return nil, 0, fmt.Errorf("runner spec: binary %q: %w", spec.Binary, err)
	}
	fail := func(err error) (*os.File, elf.Machine, error) {
		f.Close()
		return nil, 0, fmt.Errorf("runner spec: binary %q: %w", spec.Binary, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return fail(errors.New("not a regular file"))
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return fail(fmt.Errorf("not an ELF executable: %w", err))
	}
	machine := ef.Machine
	h := sha256.New()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	if _, err := io.Copy(h, f); err != nil {
		return fail(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != spec.SHA256 {
		f.Close()
		return nil, 0, fmt.Errorf("runner spec: sha256 %q: the binary %q has sha256 %s", spec.SHA256, spec.Binary, got)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	return f, machine, nil
}

// closeRunner closes the lease's ingress, ends the runners the lease
// launched (endRunnersScript) and removes its lease directory (socket and
// runner state directories) on the server; the uploaded binary stays. It
// returns how many runner processes it ended; an error means some may
// still run.
func (sb *sandbox) closeRunner(ctx context.Context) (int, error) {
	sb.runnerMu.Lock()
	in, dir := sb.ingress, sb.leaseDir
	sb.runnerMu.Unlock()
	if in != nil {
		_ = in.Close()
	}
	if dir == "" {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, sb.t.connectTimeout+20*time.Second)
	defer cancel()
	out, code, err := sb.c.control(ctx, endRunnersScript(sb.dirKey))
	if err != nil {
		return 0, fmt.Errorf("ssh %s: release: ending the lease's runners: %w", sb.id, err)
	}
	n, perr := strconv.Atoi(strings.TrimSpace(out))
	if code != 0 || perr != nil {
		return 0, fmt.Errorf("ssh %s: release: runner processes still running after SIGKILL: %s", sb.id, clip([]byte(out)))
	}
	if _, code, err := sb.c.control(ctx, "rm -rf -- "+shQuote(dir)); err != nil || code != 0 {
		sb.d.log.Warn("ssh release: removing the runner's lease directory failed", "id", sb.id, "dir", dir, "exit", code, "error", err)
	}
	sb.runnerMu.Lock()
	sb.leaseDir = ""
	sb.runnerMu.Unlock()
	return n, nil
}

// ingress is the ssh driver's drivers.RunnerIngress: one listener on the
// berth host fed by a remote forward that is re-opened at the same socket
// path on every new connection.
type ingress struct {
	sb   *sandbox
	dir  string // the lease directory on the server
	sock string // the socket path on the server

	conns  chan net.Conn
	done   chan struct{}
	ctx    context.Context // ends at Close: bounds re-opening the forward
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	ln       net.Listener // the current remote forward
	forwards int          // forwards opened so far
	binary   string       // the runner's path on the server
	// tcp is the server's loopback address of a TCP forward ("" while the
	// forward is a unix socket): set when the server refused the socket.
	tcp     string
	lastDir string // the state directory of the last Launch
}

var _ drivers.RunnerIngress = (*ingress)(nil)

// Endpoint returns "unix:" and the socket's path on the server, or
// "http://127.0.0.1:PORT" for a TCP forward on the server's loopback.
func (in *ingress) Endpoint() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.tcp != "" {
		return "http://" + in.tcp
	}
	return "unix:" + in.sock
}

// Addr returns the socket's path on the server, or the TCP address on its
// loopback.
func (in *ingress) Addr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.tcp != "" {
		a, _ := net.ResolveTCPAddr("tcp", in.tcp)
		return a
	}
	return &net.UnixAddr{Name: in.sock, Net: "unix"}
}

// Accept returns the next connection a runner made to Endpoint, whatever
// connection to the server carried it; after Close it returns an error
// wrapping net.ErrClosed.
func (in *ingress) Accept() (net.Conn, error) {
	select {
	case c := <-in.conns:
		return c, nil
	case <-in.done:
		return nil, &net.OpError{Op: "accept", Net: "unix", Addr: in.Addr(), Err: net.ErrClosed}
	}
}

// Close stops forwarding and removes the socket on the server. It stops
// no runner; a second Close does nothing.
func (in *ingress) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	close(in.done)
	in.cancel()
	ln := in.ln
	in.mu.Unlock()
	if ln != nil {
		_ = ln.Close() // cancel-streamlocal-forward; fails on a dead connection
	}
	in.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), in.sb.t.connectTimeout+10*time.Second)
	defer cancel()
	var err error
	if _, code, cerr := in.sb.c.control(ctx, "rm -f -- "+shQuote(in.sock)); cerr != nil {
		err = fmt.Errorf("ssh %s: close the runner ingress: remove %s: %w", in.sb.id, in.sock, cerr)
	} else if code != 0 {
		err = fmt.Errorf("ssh %s: close the runner ingress: remove %s: exit %d", in.sb.id, in.sock, code)
	}
	in.sb.runnerMu.Lock()
	if in.sb.ingress == in {
		in.sb.ingress = nil
	}
	in.sb.runnerMu.Unlock()
	in.sb.d.log.Debug("ssh runner ingress closed", "id", in.sb.id, "socket", in.sock)
	return err
}

// Launch starts the installed runner detached (driverkit.LaunchRunnerByExec)
// with a state directory of the lease directory kept per req.Lease, so that
// a runner launched again for the same lease resumes its session.
func (in *ingress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed {
		return fmt.Errorf("ssh %s: launch runner: the ingress is closed", in.sb.id)
	}
	state := in.dir + "/state-" + shortHash(req.Lease)
	in.mu.Lock()
	in.lastDir = state
	in.mu.Unlock()
	env := make(map[string]string, len(req.Env)+1)
	for k, v := range req.Env {
		env[k] = v
	}
	env[driverkit.RunnerMarkEnv] = in.sb.dirKey
	req.Env = env
	in.mu.Lock()
	binary := in.binary
	in.mu.Unlock()
	return driverkit.LaunchRunnerByExec(ctx, in.sb, binary, in.Endpoint(), state, req)
}

// LogTail returns the tail of runner.log in the state directory of the
// last Launch through one command on the pooled connection
// (driverkit.RunnerLogTailByExec), nil before any Launch.
func (in *ingress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	in.mu.Lock()
	dir := in.lastDir
	in.mu.Unlock()
	if dir == "" {
		return nil, nil
	}
	b, err := driverkit.RunnerLogTailByExec(ctx, in.sb, dir, limit)
	if err != nil {
		return nil, fmt.Errorf("ssh: %w", err)
	}
	return b, nil
}

// endRunnersScript ends every process of the login user whose environment
// holds the entry driverkit.RunnerMarkEnv=nonce (grep -z, in GNU's and busybox's
// grep), and every runner whose state directory is in the lease directory
// (its argument --state-dir=..., driverkit.LaunchRunnerByExec): a runner
// is not dumpable, so where the login user is not root nothing of its
// account can read its environment, but anything can read its command
// line (the regular expression's own text, in grep's argv, does not match
// itself). SIGTERM (a runner stops its tasks and exits), SIGKILL after
// about 2.5 s, and prints how many it found once none is left; after
// about 5 s more it prints "alive PID..." and exits 1.
func endRunnersScript(nonce string) string {
	return `m='` + driverkit.RunnerMarkEnv + `=` + nonce + `'; a='^--state-dir=.*/` + nonce + `/state-[^/]*$'; ` +
		`list() { s=' '; for f in $(grep -lszxF "$m" /proc/[0-9]*/environ 2>/dev/null) $(grep -lsz -- "$a" /proc/[0-9]*/cmdline 2>/dev/null); do q=${f#/proc/}; q=${q%/*}; case "$s" in *" $q "*) ;; *) s="$s$q "; printf '%s ' "$q" ;; esac; done; }; ` +
		`wait_gone() { i=0; while [ $i -lt $1 ]; do [ -z "$(list)" ] && return 0; sleep 0.1; i=$((i+1)); done; return 1; }; ` +
		`pids=$(list); set -- $pids; n=$#; [ $n -eq 0 ] && { echo 0; exit 0; }; ` +
		`kill -TERM $pids 2>/dev/null; wait_gone 25 && { echo $n; exit 0; }; ` +
		`pids=$(list); [ -n "$pids" ] && kill -KILL $pids 2>/dev/null; wait_gone 50 && { echo $n; exit 0; }; ` +
		`echo "alive $(list)"; exit 1`
}

// listen opens the remote forward on the pooled connection's current
// client, after removing what an earlier forward left at the path; a
// broken connection is redialed by the pool first. The first forward is a
// unix socket, or a TCP port on the server's loopback when the server
// refuses the socket; later ones repeat what the first got.
func (in *ingress) listen(ctx context.Context) (net.Listener, error) {
	ctx, cancel := context.WithTimeout(ctx, in.sb.t.connectTimeout+10*time.Second)
	defer cancel()
	// The control command runs on the connection the forward will use:
	// the pool redials a broken one before it.
	_, code, err := in.sb.c.control(ctx, "rm -f -- "+shQuote(in.sock))
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("removing a stale socket: exit %d", code)
	}
	c := in.sb.c
	c.mu.Lock()
	cl, closed := c.client, c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("connection closed: %w", drivers.ErrReleased)
	}
	in.mu.Lock()
	tcp, first := in.tcp, in.forwards == 0
	in.mu.Unlock()
	var ln net.Listener
	if tcp != "" {
		ln, err = cl.Listen("tcp", tcp)
		if err != nil {
			return nil, fmt.Errorf("tcpip-forward %s: %w", tcp, err)
		}
	} else {
		ln, err = cl.ListenUnix(in.sock)
		switch {
		case err != nil && first && refused(err):
			// The port an earlier session of the lease forwarded (another
			// process, before a restart), so that its runner reaches this
			// one; else one the server picks, recorded for the next.
			saved := in.savedTCP(ctx)
			var terr error
			if saved != "" {
				ln, terr = cl.Listen("tcp", saved)
			}
			if saved == "" || terr != nil {
				ln, terr = cl.Listen("tcp", "127.0.0.1:0")
			}
			if terr == nil && ln.Addr().String() != saved {
				in.saveTCP(ctx, ln.Addr().String())
			}
			if terr != nil {
				if refused(terr) {
					return nil, fmt.Errorf("the server %s refused to forward a unix socket (streamlocal-forward@openssh.com %s) and a TCP port on its loopback (tcpip-forward 127.0.0.1:0)%s: %w",
						in.sb.t.addr(), in.sock, forwardHint(cl.ServerVersion()), drivers.ErrUnsupported)
				}
				return nil, fmt.Errorf("tcpip-forward 127.0.0.1:0: %w", terr)
			}
			in.mu.Lock()
			in.tcp = ln.Addr().String()
			in.mu.Unlock()
			in.sb.d.log.Debug("ssh runner ingress: the server refused a unix socket forward; forwarding a TCP port on its loopback", "id", in.sb.id, "addr", ln.Addr().String())
		case err != nil:
			return nil, fmt.Errorf("streamlocal-forward@openssh.com %s: %w", in.sock, err)
		}
	}
	in.mu.Lock()
	in.forwards++
	in.mu.Unlock()
	return ln, nil
}

// tcpAddrFile is the file of the lease directory that records the loopback
// address of the lease's TCP forward (savedTCP).
const tcpAddrFile = "tcp-forward"

// savedTCP returns the loopback address an earlier session of the lease
// recorded for its TCP forward (saveTCP), or "".
func (in *ingress) savedTCP(ctx context.Context) string {
	out, code, err := in.sb.c.control(ctx, "cat -- "+shQuote(in.dir+"/"+tcpAddrFile)+" 2>/dev/null")
	addr := strings.TrimSpace(out)
	host, port, serr := net.SplitHostPort(addr)
	if err != nil || code != 0 || serr != nil || host != "127.0.0.1" {
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return ""
	}
	return addr
}

// saveTCP records addr as the lease's TCP forward in the lease directory,
// best effort: without it a later session's runner cannot reach a
// runner launched by this one.
func (in *ingress) saveTCP(ctx context.Context, addr string) {
	if _, code, err := in.sb.c.control(ctx, "printf '%s\\n' "+shQuote(addr)+" > "+shQuote(in.dir+"/"+tcpAddrFile)); err != nil || code != 0 {
		in.sb.d.log.Info("ssh runner ingress: recording the TCP forward's port", "id", in.sb.id, "exit", code, "error", err)
	}
}

// What a server forwards for the runner's ingress (MeasureForwarding, the
// forwarding knob).
const (
	forwardingUnix = "unix" // a unix socket (streamlocal-forward@openssh.com)
	forwardingTCP  = "tcp"  // a TCP port on its loopback only
	forwardingNone = "none" // neither
)

// MeasureForwarding reports what the server forwards for the runner's
// ingress: it opens a remote forward of a unix socket in the lease
// directory, else of a TCP port on the server's loopback, and closes it at
// once; nothing is uploaded and no runner starts. It returns
// "unix", "tcp" or "none" (both refused); an error
// means the measurement itself failed (the connection). The probe reports
// it (probe.Result.Forwarding); a config with forwarding "none" narrows
// runner_ingress away.
func (sb *sandbox) MeasureForwarding(ctx context.Context) (string, error) {
	sb.runnerMu.Lock()
	defer sb.runnerMu.Unlock()
	res, err := sb.run(ctx, sb.c.command(leaseDirScript(sb.dirKey)), drivers.Command{OutputLimit: 8 << 10})
	if err != nil {
		return "", fmt.Errorf("ssh %s: measure forwarding: lease directory: %w", sb.id, err)
	}
	dir := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("ssh %s: measure forwarding: lease directory: exit %d: %s", sb.id, res.ExitCode, clip(res.Stderr))
	}
	sb.leaseDir = dir // Release removes it
	sb.c.mu.Lock()
	cl, closed := sb.c.client, sb.c.closed
	sb.c.mu.Unlock()
	if closed {
		return "", fmt.Errorf("ssh %s: measure forwarding: %w", sb.id, drivers.ErrReleased)
	}
	ln, err := cl.ListenUnix(dir + "/probe.sock")
	if err == nil {
		_ = ln.Close()
		_, _, _ = sb.c.control(ctx, "rm -f -- "+shQuote(dir+"/probe.sock"))
		return forwardingUnix, nil
	}
	if !refused(err) {
		return "", fmt.Errorf("ssh %s: measure forwarding: streamlocal-forward@openssh.com: %w", sb.id, err)
	}
	ln, err = cl.Listen("tcp", "127.0.0.1:0")
	if err == nil {
		_ = ln.Close()
		return forwardingTCP, nil
	}
	if !refused(err) {
		return "", fmt.Errorf("ssh %s: measure forwarding: tcpip-forward: %w", sb.id, err)
	}
	return forwardingNone, nil
}

// refused reports whether err is the server's answer "no" to a forward
// request (x/crypto/ssh's "request denied by peer"), not a broken
// connection.
func refused(err error) bool { return strings.Contains(err.Error(), "request denied by peer") }

// forwardHint names the server setting that allows forwarding, for the
// servers whose setting is known (by the version banner).
func forwardHint(version []byte) string {
	v := strings.ToLower(string(version))
	switch {
	case strings.Contains(v, "openssh"):
		return " (OpenSSH: AllowStreamLocalForwarding or AllowTcpForwarding in sshd_config)"
	case strings.Contains(v, "dropbear"):
		return " (Dropbear: remote forwarding is off when it runs with -k)"
	}
	return ""
}

// serve hands the connections of ln to Accept; when ln ends without Close
// (the connection broke) it opens the forward again at the same path,
// retrying with backoff until it succeeds or the ingress is closed.
func (in *ingress) serve(ln net.Listener) {
	defer in.wg.Done()
	for {
		for {
			c, err := ln.Accept()
			if err != nil {
				break
			}
			select {
			case in.conns <- c:
			case <-in.done:
				c.Close()
				return
			}
		}
		_ = ln.Close()
		backoff := 50 * time.Millisecond
		for {
			select {
			case <-in.done:
				return
			default:
			}
			next, err := in.listen(in.ctx)
			if err == nil {
				in.mu.Lock()
				if in.closed {
					in.mu.Unlock()
					_ = next.Close()
					return
				}
				in.ln = next
				in.mu.Unlock()
				in.sb.d.log.Info("ssh runner ingress re-opened", "id", in.sb.id, "socket", in.sock)
				ln = next
				break
			}
			in.sb.d.log.Debug("ssh runner ingress: re-opening the forward failed", "id", in.sb.id, "error", err)
			select {
			case <-in.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

var _ drivers.ArchReporter = (*driver)(nil)

// RunnerArch implements drivers.ArchReporter: the host's `uname -m`,
// normalized (x86_64 is amd64, aarch64 is arm64), over the config's
// (pooled) connection; no workspace is made and nothing is left on the
// host. Errors are Acquire's connection errors, or drivers.ErrUnavailable
// when uname fails.
func (d *driver) RunnerArch(ctx context.Context, cfg config.Config) (string, error) {
	t, err := parseTarget(d.schema, cfg)
	if err != nil {
		return "", err
	}
	c, err := d.pool.get(ctx, t)
	if err != nil {
		return "", err
	}
	defer d.pool.put(c)
	sb := &sandbox{d: d, c: c, t: t, running: map[*process]struct{}{}, nonce: newNonce()}
	res, err := sb.run(ctx, wrapSh(`uname -m`), drivers.Command{OutputLimit: 4 << 10})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("ssh %s@%s: uname -m: exit %d: %s: %w", t.user, t.addr(), res.ExitCode, clip(res.Stderr), drivers.ErrUnavailable)
	}
	arch, _ := qualification.NormalizeArch(string(res.Stdout), "")
	return arch, nil
}
