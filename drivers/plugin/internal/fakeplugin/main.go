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
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/plugin"
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
	plugin.Serve(fake.New(&fake.Options{Handlers: hs}), version)
}
