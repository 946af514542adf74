package kubernetes

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/internal/execrelay"
)

// The runner's places in the pod: an emptyDir volume that a pod acquired
// with AcquireRequest.Runner has, mounted at runnerDir (no host path: the
// pod may run on a remote node). Only those pods have it: the kubelet's
// mount of an emptyDir adds about 250 ms to a pod's start.
const (
	runnerVolume   = "berth-runner"
	runnerDir      = "/.berth"
	runnerBinary   = runnerDir + "/bin/berth-runner"
	runnerSocket   = runnerDir + "/run/prp.sock"
	runnerStateDir = runnerDir + "/state"
)

// hasRunnerVolume reports whether pod has the runner's emptyDir.
func hasRunnerVolume(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == runnerVolume && v.EmptyDir != nil {
			return true
		}
	}
	return false
}

// addRunnerVolume gives the pod the runner's emptyDir at runnerDir.
func addRunnerVolume(pod *corev1.Pod) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: runnerVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: runnerVolume, MountPath: runnerDir})
}

var _ drivers.RunnerHost = (*sandbox)(nil)

// runnerState is what a sandbox handle knows of its runner: the open
// ingress.
type runnerState struct {
	mu      sync.Mutex
	ingress *ingress
}

// HostRunner (drivers.RunnerHost) installs the runner of spec in a pod
// acquired with AcquireRequest.Runner (others are refused with
// drivers.ErrUnsupported) at /.berth/bin/berth-runner, unless the file
// there has spec's sum (read in the pod at each call, as the SSH driver
// does: a task of the container's user can replace the file, and the
// next launch would run its program as the runner), as a tar stream
// through exec proven whole as the files capability's are; then it opens
// the ingress: internal/execrelay's relay (berth-runner relay) at
// /.berth/run/prp.sock, carried over one streaming exec through the API
// server, so that the runner reaches the host with no network path from
// the pod. One open ingress per handle; Release closes it.
func (s *sandbox) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	if !s.runnerDir {
		return nil, fmt.Errorf("%s: host runner: capability %s: the pod was acquired without AcquireRequest.Runner (the runner's emptyDir is made only at creation): %w",
			s.target(), drivers.CapRunnerIngress, drivers.ErrUnsupported)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%s: host runner: %w", s.target(), err)
	}
	s.runner.mu.Lock()
	defer s.runner.mu.Unlock()
	if in := s.runner.ingress; in != nil && !in.isClosed() {
		return nil, fmt.Errorf("%s: host runner: an ingress is already open", s.target())
	}
	if s.installedSum(ctx) != spec.SHA256 {
		if err := s.installRunner(ctx, spec); err != nil {
			return nil, err
		}
	}
	ri, err := execrelay.OpenIngress(ctx, s, execrelay.IngressConfig{Binary: runnerBinary, Socket: runnerSocket, StateDir: runnerStateDir})
	if err != nil {
		return nil, fmt.Errorf("%s: host runner: %w", s.target(), err)
	}
	if err := s.checkLive(); err != nil { // released meanwhile: its Release closes only what it saw
		_ = ri.Close()
		return nil, err
	}
	in := &ingress{RunnerIngress: ri}
	s.runner.ingress = in
	return in, nil
}

// ingress is execrelay's ingress, knowing whether it was closed.
type ingress struct {
	drivers.RunnerIngress
	mu     sync.Mutex
	closed bool
}

func (in *ingress) Close() error {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	return in.RunnerIngress.Close()
}

func (in *ingress) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

// closeIngress closes the handle's open ingress, if any.
func (s *sandbox) closeIngress() {
	s.runner.mu.Lock()
	in := s.runner.ingress
	s.runner.ingress = nil
	s.runner.mu.Unlock()
	if in != nil {
		_ = in.Close()
	}
}

// installedSum returns the SHA-256 of the regular file at runnerBinary in
// the pod, or "" when there is none or it cannot be read (an install
// follows: a lost or garbled answer costs a copy, never a stale binary).
func (s *sandbox) installedSum(ctx context.Context) string {
	res, err := s.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `[ -f "$1" ] && [ ! -L "$1" ] && sha256sum "$1"`, "sh", runnerBinary},
		OutputLimit: 512})
	if err != nil || res.ExitCode != 0 {
		return ""
	}
	sum, _, _ := strings.Cut(string(res.Stdout), " ")
	return sum
}

// installRunner puts spec.Binary at runnerBinary (mode 0755) and makes the
// socket's and the state's directories (mode 0700), as one tar stream
// through exec (driverkit.ExecFiles: the archive is sent whole, and tar in
// the pod extracts it to its end). The binary's sum is checked on this
// side as the stream is made: a file that changed since the spec was made
// is refused.
func (s *sandbox) installRunner(ctx context.Context, spec drivers.RunnerSpec) error {
	f, err := os.Open(spec.Binary)
	if err != nil {
		return fmt.Errorf("%s: host runner: runner spec: %w", s.target(), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: host runner: runner spec: binary %q is no regular file (%v)", s.target(), spec.Binary, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(runnerArchive(pw, f, fi.Size(), spec.SHA256)) }()
	files := driverkit.ExecFiles{Sandbox: s.name, Workdir: runnerDir, Start: s.Start}
	err = files.PutArchive(ctx, ".", pr)
	pr.Close()
	if err != nil {
		return fmt.Errorf("%s: host runner: install the runner: %w", s.target(), err)
	}
	return nil
}

// runnerArchive writes the tar stream of the runner's directories and of
// the binary f (size bytes), failing before the archive's end when f's
// SHA-256 is not sum.
func runnerArchive(w io.Writer, f io.Reader, size int64, sum string) error {
	tw := tar.NewWriter(w)
	for _, d := range []string{"bin/", "run/", "state/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o700}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/berth-runner", Mode: 0o755, Size: size}); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.CopyN(tw, io.TeeReader(f, h), size); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("runner spec: the binary's sha256 is %s, want %s", got, sum)
	}
	return tw.Close()
}
