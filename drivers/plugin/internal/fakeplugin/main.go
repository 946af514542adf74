// Command fakeplugin is the fake driver (drivers/fake) served as a berth
// plugin, for the tests of package drivers/plugin, which build it. It
// answers the conformance suite's scripts (drivertest.ScriptHandlers) and
// two commands of its own: "fail REASON", whose Exec fails with the
// driver contract's sentinel of that reason (auth_failed, transient,
// image_not_found). When BERTH_FAKEPLUGIN_MARK names a file, it creates
// that file when it starts, so that a test sees whether it ran; when
// BERTH_FAKEPLUGIN_STDERR is a number N, it writes N numbered lines and one
// of 5000 bytes to its stderr when it starts; when
// BERTH_FAKEPLUGIN_PROTOCOL is 2, it answers go-plugin's handshake as a
// plugin of protocol version 2 (and serves nothing).
//
// Its faults are its configuration: the JSON file beside the binary named
// as the binary with FaultsSuffix ("fakeplugin.faults.json"), if there is
// one, gives the fake's API key ({"apiKey": "..."}: every operation needs
// it in the config's api_key) and the operations that fail
// ({"faults": [{"op": "create", "error": "unavailable"}]}, error one of
// unavailable, transient, auth_failed, image_not_found), as the fake's own
// harness builds them in process. A copy of the binary in another
// directory with another faults file is another configuration of the
// same pinned binary.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/internal/fakectl"
)

// version is the plugin's version, as its manifest records it.
const version = "1.0.0"

func main() {
	if mark := os.Getenv("BERTH_FAKEPLUGIN_MARK"); mark != "" {
		if err := os.WriteFile(mark, []byte("started\n"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fakeplugin:", err)
			os.Exit(2)
		}
	}
	if n, err := strconv.Atoi(os.Getenv("BERTH_FAKEPLUGIN_STDERR")); err == nil {
		for i := range n {
			fmt.Fprintf(os.Stderr, "fakeplugin line %d\n", i)
		}
		fmt.Fprintln(os.Stderr, strings.Repeat("x", 5000))
	}
	if os.Getenv("BERTH_FAKEPLUGIN_PROTOCOL") == "2" {
		goplugin.Serve(&goplugin.ServeConfig{
			HandshakeConfig: goplugin.HandshakeConfig{ProtocolVersion: 2, MagicCookieKey: "BERTH_PLUGIN", MagicCookieValue: "berth-driver-plugin"},
			Plugins:         goplugin.PluginSet{},
			GRPCServer:      goplugin.DefaultGRPCServer,
		})
		return
	}
	hs := map[string]fake.HandlerFunc{}
	for script, h := range drivertest.ScriptHandlers() {
		hs[script] = func(ctx context.Context, inv fake.Invocation) (int, error) {
			return h(ctx, inv.Stdin, inv.Stdout, inv.Stderr)
		}
	}
	hs["fail"] = func(_ context.Context, inv fake.Invocation) (int, error) {
		errs := map[string]error{"auth_failed": drivers.ErrAuth, "transient": drivers.ErrTransient, "image_not_found": drivers.ErrImageNotFound}
		if len(inv.Argv) == 2 && errs[inv.Argv[1]] != nil {
			return -1, fmt.Errorf("fakeplugin: failing as asked: %w", errs[inv.Argv[1]])
		}
		return 2, nil
	}
	opts := &fake.Options{Handlers: hs}
	faults, err := readFaults()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeplugin:", err)
		os.Exit(2)
	}
	opts.APIKey = faults.APIKey
	d := fake.New(opts)
	for _, f := range faults.Faults {
		fakectl.Of(d).Inject(fakectl.Fault{Op: f.Op, Err: faultErrs[f.Error]})
	}
	plugin.Serve(d, version)
}

// FaultsSuffix ends the name of the faults file beside the binary.
const FaultsSuffix = ".faults.json"

// faultErrs are the errors a fault may name.
var faultErrs = map[string]error{
	"unavailable":     fmt.Errorf("control plane refused the connection: %w", drivers.ErrUnavailable),
	"transient":       fmt.Errorf("the provider is busy: %w", drivers.ErrTransient),
	"auth_failed":     fmt.Errorf("the provider refused the credentials: %w", drivers.ErrAuth),
	"image_not_found": fmt.Errorf("no such image at the provider: %w", drivers.ErrImageNotFound),
}

type faultsFile struct {
	APIKey string `json:"apiKey"`
	Faults []struct {
		Op    string `json:"op"`
		Error string `json:"error"`
	} `json:"faults"`
}

// readFaults reads the faults file beside the binary; none is no fault.
func readFaults() (faultsFile, error) {
	var f faultsFile
	exe, err := os.Executable()
	if err != nil {
		return f, err
	}
	b, err := os.ReadFile(exe + FaultsSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s%s: %w", exe, FaultsSuffix, err)
	}
	for _, x := range f.Faults {
		if faultErrs[x.Error] == nil {
			return f, fmt.Errorf("%s%s: fault %q: error %q: want unavailable, transient, auth_failed or image_not_found", exe, FaultsSuffix, x.Op, x.Error)
		}
	}
	return f, nil
}
