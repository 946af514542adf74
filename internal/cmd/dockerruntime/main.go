// Command dockerruntime registers an OCI runtime (gVisor's runsc by
// default) with this machine's Docker engine, for make test's runsc pass
// (issue 56): it merges
//
//	{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": [...]}}}
//
// into the daemon config (/etc/docker/daemon.json), keeping every other key
// and every other runtime as they are, then sends SIGHUP to dockerd, which
// reloads its runtimes live: the engine is never restarted, so the
// containers of other tests keep running. It does nothing when the file
// already holds that runtime and the engine lists it. It waits until the
// engine lists the runtime (docker info), and fails, naming what to do,
// otherwise.
//
//	go run ./internal/cmd/dockerruntime [-config /etc/docker/daemon.json] [-name runsc] [-path /usr/bin/runsc]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/client"
)

// defaultArgs are runsc's arguments on berth's test machines: ptrace (no
// KVM in a VM without nested virtualization), host unix sockets open (the
// runner's ingress is a bind-mounted socket), its own network off (a
// network other than none does not start there), and the root overlay off
// so that docker commit (template capture) sees the container's writes.
var defaultArgs = []string{"--platform=ptrace", "--host-uds=open", "--network=none", "--overlay2=none"}

// runtime is one entry of the daemon config's "runtimes".
type runtime struct {
	Path        string   `json:"path"`
	RuntimeArgs []string `json:"runtimeArgs,omitempty"`
}

func main() {
	cfgPath := flag.String("config", "/etc/docker/daemon.json", "the Docker daemon config file")
	name := flag.String("name", "runsc", "the runtime's name")
	path := flag.String("path", "/usr/bin/runsc", "the runtime's binary")
	flag.Parse()
	if err := run(*cfgPath, *name, runtime{Path: *path, RuntimeArgs: defaultArgs}); err != nil {
		fmt.Fprintln(os.Stderr, "dockerruntime:", err)
		os.Exit(1)
	}
}

func run(cfgPath, name string, rt runtime) error {
	if _, err := os.Stat(rt.Path); err != nil {
		return fmt.Errorf("the runtime binary: %w (install Debian's runsc package)", err)
	}
	changed, pidfile, err := merge(cfgPath, name, rt)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("the Docker client: %w", err)
	}
	defer cli.Close()
	listed := func() (bool, error) {
		info, err := cli.Info(ctx)
		if err != nil {
			return false, fmt.Errorf("docker info: %w (is the engine running?)", err)
		}
		_, ok := info.Runtimes[name]
		return ok, nil
	}
	ok, err := listed()
	if err != nil {
		return err
	}
	if ok && !changed {
		fmt.Printf("dockerruntime: %s is already registered with the engine\n", name)
		return nil
	}
	if err := reload(pidfile); err != nil {
		return err
	}
	for {
		if ok, err := listed(); err != nil {
			return err
		} else if ok {
			fmt.Printf("dockerruntime: registered %s (%s %s) in %s; dockerd reloaded its config\n", name, rt.Path, strings.Join(rt.RuntimeArgs, " "), cfgPath)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the engine does not list runtime %s 30s after SIGHUP: see dockerd's log for why it refused %s", name, cfgPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// merge sets runtimes[name] to rt in the JSON object at cfgPath (created
// when missing), keeping every other key byte for byte, and reports
// whether it changed the file, and the config's pidfile (dockerd's
// default when unset). It writes through a temporary file renamed into
// place, with the old file's mode.
func merge(cfgPath, name string, rt runtime) (changed bool, pidfile string, err error) {
	top := map[string]json.RawMessage{}
	mode := os.FileMode(0o644)
	b, err := os.ReadFile(cfgPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return false, "", err
	default:
		if fi, err := os.Stat(cfgPath); err == nil {
			mode = fi.Mode().Perm()
		}
		if len(bytes.TrimSpace(b)) > 0 {
			if err := json.Unmarshal(b, &top); err != nil {
				return false, "", fmt.Errorf("%s: %w: fix the file by hand; nothing was changed", cfgPath, err)
			}
		}
	}
	pidfile = "/var/run/docker.pid"
	if raw, ok := top["pidfile"]; ok {
		if err := json.Unmarshal(raw, &pidfile); err != nil {
			return false, "", fmt.Errorf("%s: pidfile: %w", cfgPath, err)
		}
	}
	runtimes := map[string]json.RawMessage{}
	if raw, ok := top["runtimes"]; ok {
		if err := json.Unmarshal(raw, &runtimes); err != nil {
			return false, "", fmt.Errorf("%s: runtimes: %w", cfgPath, err)
		}
	}
	if raw, ok := runtimes[name]; ok {
		var have runtime
		if json.Unmarshal(raw, &have) == nil && reflect.DeepEqual(have, rt) {
			return false, pidfile, nil
		}
	}
	if runtimes[name], err = json.Marshal(rt); err != nil {
		return false, "", err
	}
	if top["runtimes"], err = json.Marshal(runtimes); err != nil {
		return false, "", err
	}
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return false, "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(cfgPath), ".daemon.json.*")
	if err != nil {
		return false, "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(out, '\n')); err != nil {
		tmp.Close()
		return false, "", err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return false, "", err
	}
	if err := tmp.Close(); err != nil {
		return false, "", err
	}
	return true, pidfile, os.Rename(tmp.Name(), cfgPath)
}

// reload sends SIGHUP to the dockerd whose pid pidfile holds, after
// checking that the process is dockerd.
func reload(pidfile string) error {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return fmt.Errorf("dockerd's pid: %w: send SIGHUP to dockerd by hand", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("dockerd's pid file %s holds %q: send SIGHUP to dockerd by hand", pidfile, b)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
		return fmt.Errorf("process %d of %s is %q, not dockerd: send SIGHUP to dockerd by hand", pid, pidfile, strings.TrimSpace(string(comm)))
	}
	return syscall.Kill(pid, syscall.SIGHUP)
}
