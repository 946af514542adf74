package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The merge keeps every other key and runtime, adds the runtime once, and
// changes nothing the second time.
func TestMergeKeepsOtherKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon.json")
	const before = `{"data-root": "/var/lib/docker", "mtu": 1400, "log-opts": {"max-size": "10m"}, "pidfile": "/run/d.pid",
 "runtimes": {"crun": {"path": "/usr/bin/crun"}}}`
	if err := os.WriteFile(p, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := runtime{Path: "/usr/bin/runsc", RuntimeArgs: defaultArgs}
	changed, pidfile, err := merge(p, "runsc", rt)
	if err != nil || !changed || pidfile != "/run/d.pid" {
		t.Fatalf("merge = %v %q %v, want changed, the config's pidfile", changed, pidfile, err)
	}
	var got, want map[string]any
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(before), &want)
	want["runtimes"].(map[string]any)["runsc"] = map[string]any{"path": "/usr/bin/runsc",
		"runtimeArgs": []any{"--platform=ptrace", "--host-uds=open", "--network=none", "--overlay2=none"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged config:\n got %v\nwant %v", got, want)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old 0600", fi.Mode().Perm())
	}
	if changed, _, err := merge(p, "runsc", rt); err != nil || changed {
		t.Errorf("second merge = %v %v, want unchanged", changed, err)
	}
	if err := os.WriteFile(p, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := merge(p, "runsc", rt); err == nil {
		t.Errorf("merge into a broken file succeeded")
	}
	if b, _ := os.ReadFile(p); string(b) != "{not json" {
		t.Errorf("a broken file was changed: %q", b)
	}
}
