package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/qualification"
)

// Where a container acquired with AcquireRequest.Runner finds berth's
// runner (see "Runner ingress" in the package documentation).
const (
	// runnerBinaryPath is the read-only bind mount of RunnerSpec.Binary.
	runnerBinaryPath = "/.berth/bin/berth-runner"
	// runnerSocketDir is the read-only bind mount of the container's host
	// directory that holds the ingress socket.
	runnerSocketDir = "/.berth/run"
	// runnerSocketName is the ingress socket's name in runnerSocketDir.
	runnerSocketName = "prp.sock"
	// runnerStateDir is the runner's state directory: a tmpfs owned by
	// the user knob's uid.
	runnerStateDir = "/.berth/state"
	// labelRunner holds the SHA-256 of the runner binary a container was
	// created with.
	labelRunner = "berth.runner"
)

// runnerEndpoint is the --controller value of a runner in the container.
const runnerEndpoint = "unix:" + runnerSocketDir + "/" + runnerSocketName

// hostDirName is the name, in a container's host directory, of the
// directory mounted at runnerSocketDir.
const hostDirName = "run"

// NarrowedBy implements drivers.ConfigNarrower: runner_ingress is narrowed
// away unless the engine is reached through a unix:// socket, the one kind
// of engine host that shares this host's filesystem (the runner binary and
// the ingress socket are bind-mounted from it). No I/O.
func (d *driver) NarrowedBy(cfg config.Config) drivers.Set {
	host := cfg.String(fieldHost)
	if host == "" {
		if f, ok := d.schema.Field(fieldHost); ok {
			host, _ = f.Default.(string)
		}
	}
	if sharesFilesystem(host) {
		return 0
	}
	return drivers.NewSet(drivers.CapRunnerIngress)
}

// sharesFilesystem reports whether an engine at host sees this host's
// files: a unix:// socket does (a tcp:// engine may run anywhere).
func sharesFilesystem(host string) bool { return strings.HasPrefix(host, "unix://") }

// runnerMounts is what a container made with a Runner holds: the sum of
// the binary mounted at runnerBinaryPath, that binary's host path, and
// the host directory whose "run" subdirectory is mounted at
// runnerSocketDir.
type runnerMounts struct {
	sum     string
	binary  string // host path of the mounted binary
	hostDir string // the container's 0700 host directory
}

// socketPath is the ingress socket's path on the host.
func (m *runnerMounts) socketPath() string {
	return filepath.Join(m.hostDir, hostDirName, runnerSocketName)
}

// runnerRoot returns the directory holding the containers' host
// directories, creating it (0700) if needed. An existing one must be a
// directory owned by this process's user and closed to others, so that
// nobody else can swap what a container mounts.
func (d *driver) runnerRoot() (string, error) {
	root := d.runnerDir
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("docker: runner directory %s: %w", root, err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return "", fmt.Errorf("docker: runner directory %s: %w", root, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return "", fmt.Errorf("docker: runner directory %s is not a directory", root)
	case !ok || int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("docker: runner directory %s is not owned by uid %d", root, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return "", fmt.Errorf("docker: runner directory %s is writable by others (%s)", root, fi.Mode().Perm())
	}
	return root, nil
}

// checkRunner checks spec before anything is created: the engine must
// share this host's filesystem, spec must be well-formed and Binary must
// have the sum SHA256 says.
func checkRunner(cfg *settings, spec *drivers.RunnerSpec) error {
	if !sharesFilesystem(cfg.host) {
		return fmt.Errorf("docker %s: capability %s: the engine does not share this host's filesystem (only a unix:// engine host can mount the runner and its socket): %w",
			cfg.host, drivers.CapRunnerIngress, drivers.ErrUnsupported)
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("docker %s: %w", cfg.host, err)
	}
	if err := checkSum(spec.Binary, spec.SHA256); err != nil {
		return fmt.Errorf("docker %s: %w", cfg.host, err)
	}
	return nil
}

// makeRunnerDir makes the host directory (0700) of the container name,
// holding "run" (0711: a non-root container user may reach the socket
// inside, and nothing else), for a spec checkRunner accepted.
func (d *driver) makeRunnerDir(spec *drivers.RunnerSpec, name string) (*runnerMounts, error) {
	root, err := d.runnerRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("docker: runner directory of %s: %w", name, err)
	}
	run := filepath.Join(dir, hostDirName)
	err = os.Mkdir(run, 0o711)
	if err == nil {
		err = os.Chmod(run, 0o711) // the umask may have taken the x bits
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("docker: runner directory of %s: %w", name, err)
	}
	return &runnerMounts{sum: spec.SHA256, binary: spec.Binary, hostDir: dir}, nil
}

// checkSum reports whether the file at path has the SHA-256 want, naming
// the spec's field when it does not.
func checkSum(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("runner spec: binary %q: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("runner spec: binary %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("runner spec: binary %q: not a regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("runner spec: binary %q: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("runner spec: sha256 %q does not match binary %q (its sum is %s)", want, path, got)
	}
	return nil
}

// addRunner adds the runner's mounts and label to a container spec: the
// binary and the socket directory bind-mounted read-only, the state
// directory a tmpfs (noexec does not matter there) owned by the user
// knob's uid, as /tmp is.
func addRunner(cfg *settings, m *runnerMounts, cc *container.Config, hc *container.HostConfig) {
	cc.Labels[labelRunner] = m.sum
	hc.Mounts = append(hc.Mounts,
		mount.Mount{Type: mount.TypeBind, Source: m.binary, Target: runnerBinaryPath, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: filepath.Join(m.hostDir, hostDirName), Target: runnerSocketDir, ReadOnly: true},
	)
	opts := "rw,nosuid,nodev,noexec,mode=1777"
	if cfg.user != "" {
		uid, gid, ok := strings.Cut(cfg.user, ":")
		if !ok {
			gid = uid
		}
		opts = "rw,nosuid,nodev,noexec,mode=0700,uid=" + uid + ",gid=" + gid
	}
	if cfg.memory > 0 {
		opts += ",size=" + strconv.FormatInt(cfg.memory, 10)
	}
	if hc.Tmpfs == nil {
		hc.Tmpfs = map[string]string{}
	}
	hc.Tmpfs[runnerStateDir] = opts
}

// runnerOf reads a container's runner mounts back from its inspection: the
// label and both bind mounts must be there, and the socket directory must
// lie in this driver's runner directory. nil when the container was made
// without a Runner.
func (d *driver) runnerOf(ins container.InspectResponse) *runnerMounts {
	if ins.Config == nil || ins.Config.Labels[labelRunner] == "" {
		return nil
	}
	m := &runnerMounts{sum: ins.Config.Labels[labelRunner]}
	for _, mp := range ins.Mounts {
		switch mp.Destination {
		case runnerBinaryPath:
			m.binary = mp.Source
		case runnerSocketDir:
			if filepath.Base(mp.Source) == hostDirName {
				m.hostDir = filepath.Dir(mp.Source)
			}
		}
	}
	if m.binary == "" || m.hostDir == "" || filepath.Dir(m.hostDir) != filepath.Clean(d.runnerDir) {
		return nil
	}
	return m
}

// removeRunnerDir removes a container's host directory, if it has one.
func (d *driver) removeRunnerDir(m *runnerMounts) {
	if m == nil {
		return
	}
	if err := os.RemoveAll(m.hostDir); err != nil {
		d.log.Warn("docker: removing a runner directory", "dir", m.hostDir, "err", err)
	}
}

// HostRunner opens the ingress of a container acquired with
// AcquireRequest.Runner: a unix socket (mode 0666, in a 0711 directory
// inside a 0700 one, so that only the container's users reach it) in the
// container's host directory, which the container sees at runnerSocketDir.
// Nothing is copied: the binary was mounted at creation, so spec must have
// the sum the container was created with, and the mounted file must still
// have it. A container acquired without a Runner is refused with an error
// wrapping drivers.ErrUnsupported. One open ingress per handle; a stale
// socket left by an earlier one is replaced.
func (s *sandbox) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	s.closePrimed() // a primed exec serves a first command that nothing else preceded (prime.go)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("docker: host runner in %s: %w", s.id, err)
	}
	if s.runner == nil {
		return nil, fmt.Errorf("docker: host runner in %s: capability %s: the container was acquired without AcquireRequest.Runner (the runner and its socket are mounted only at creation): %w",
			s.id, drivers.CapRunnerIngress, drivers.ErrUnsupported)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("docker: host runner in %s: %w", s.id, err)
	}
	if spec.SHA256 != s.runner.sum {
		return nil, fmt.Errorf("docker: host runner in %s: runner spec: sha256 %q differs from the %s the container was created with (its binary mount is fixed at creation): %w",
			s.id, spec.SHA256, s.runner.sum, drivers.ErrUnsupported)
	}
	if err := checkSum(s.runner.binary, spec.SHA256); err != nil {
		return nil, fmt.Errorf("docker: host runner in %s: the mounted binary changed: %w", s.id, err)
	}
	s.ingressMu.Lock()
	defer s.ingressMu.Unlock()
	if s.ingress != nil && !s.ingress.isClosed() {
		return nil, fmt.Errorf("docker: host runner in %s: an ingress is already open", s.id)
	}
	sock := s.runner.socketPath()
	if fi, err := os.Lstat(sock); err == nil && fi.Mode().Type() == fs.ModeSocket {
		_ = os.Remove(sock) // a stale socket of a closed ingress or a crashed host
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("docker: host runner in %s: listen on %s: %w", s.id, sock, err)
	}
	// The container sees the directory read-only, so nothing in it can
	// swap the socket for a link before the chmod.
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("docker: host runner in %s: %w", s.id, err)
	}
	in := &ingress{Listener: ln, s: s}
	s.ingress = in
	return in, nil
}

// closeIngress closes the handle's open ingress, if any.
func (s *sandbox) closeIngress() {
	s.ingressMu.Lock()
	in := s.ingress
	s.ingressMu.Unlock()
	if in != nil {
		_ = in.Close()
	}
}

// ingress is the Docker driver's drivers.RunnerIngress.
type ingress struct {
	net.Listener
	s *sandbox

	mu       sync.Mutex
	closed   bool
	launched bool
}

var _ drivers.RunnerIngress = (*ingress)(nil)

// Endpoint returns "unix:/.berth/run/prp.sock", the socket's path in the
// container.
func (in *ingress) Endpoint() string { return runnerEndpoint }

func (in *ingress) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

// Close stops listening and removes the socket. It stops no runner: a
// runner reconnects once an ingress is opened again.
func (in *ingress) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	in.mu.Unlock()
	err := in.Listener.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Launch starts the mounted runner in the container, detached, through
// driverkit.LaunchRunnerByExec: state in runnerStateDir, output appended to
// runnerStateDir/runner.log, the ticket in a 0600 file there.
func (in *ingress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	if in.isClosed() {
		return fmt.Errorf("docker: launch runner in %s: the ingress is closed", in.s.id)
	}
	in.mu.Lock()
	in.launched = true
	in.mu.Unlock()
	return driverkit.LaunchRunnerByExec(ctx, in.s, runnerBinaryPath, runnerEndpoint, runnerStateDir, req)
}

// LogTail returns the tail of runnerStateDir/runner.log through one exec in
// the container (driverkit.RunnerLogTailByExec), nil before any Launch
// through this ingress.
func (in *ingress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	in.mu.Lock()
	launched := in.launched
	in.mu.Unlock()
	if !launched {
		return nil, nil
	}
	b, err := driverkit.RunnerLogTailByExec(ctx, in.s, runnerStateDir, limit)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	return b, nil
}

var _ drivers.ArchReporter = (*driver)(nil)

// RunnerArch implements drivers.ArchReporter: the engine's architecture
// (its /info, normalized: x86_64 is amd64, aarch64 is arm64), the one its
// containers run natively. Nothing is allocated; an engine that cannot
// be reached is drivers.ErrUnavailable naming the host.
func (d *driver) RunnerArch(ctx context.Context, raw config.Config) (string, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return "", err
	}
	cli, err := d.client(cfg.host)
	if err != nil {
		return "", err
	}
	info, err := cli.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("docker %s: info: %v: %w", cfg.host, err, drivers.ErrUnavailable)
	}
	arch, _ := qualification.NormalizeArch(info.Architecture, "")
	return arch, nil
}
