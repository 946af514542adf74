package fake_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
)

// A fake sandbox runs commands in Go and reports the platform it was given;
// a command it does not know fails, naming the handler to register.
func Example_acquireExecRelease() {
	ctx := context.Background()
	d := fake.New(nil)
	cfg, err := d.Schema().Normalize(map[string]any{"image": fake.DefaultImage})
	if err != nil {
		panic(err)
	}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: map[string]string{"berth.dev/owner": "example"}})
	if err != nil {
		panic(err)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "uname -sm"}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s exit %d: %s", sb.ID(), res.ExitCode, res.Stdout)
	res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"make", "test"}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stderr)
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.State, r.Proves(sb.ID(), drivers.Destroy))
	// Output:
	// fake-1 exit 0: Linux x86_64
	// exit 127: fake: no handler for "make": register one in Options.Handlers["make"]
	// destroyed true
}

// Commands the fake does not build in run through Options.Handlers: by
// argv[0] (or its base name), or, for sh -c SCRIPT, by the whole script.
func Example_handlers() {
	ctx := context.Background()
	d := fake.New(&fake.Options{Handlers: map[string]fake.HandlerFunc{
		"make": func(_ context.Context, inv fake.Invocation) (int, error) {
			fmt.Fprintf(inv.Stdout, "made %s in %s\n", strings.Join(inv.Argv[1:], " "), inv.Dir)
			return 0, nil
		},
		"cd src && make": func(_ context.Context, inv fake.Invocation) (int, error) {
			fmt.Fprintln(inv.Stderr, "no src")
			return 2, nil
		},
	}})
	sb, err := d.Acquire(ctx, config.Config{}, drivers.AcquireRequest{})
	if err != nil {
		panic(err)
	}
	for _, argv := range [][]string{
		{"/usr/bin/make", "test"},
		{"sh", "-c", "make 'all the things'"},
		{"sh", "-c", "cd src && make"},
	} {
		res, err := sb.Exec(ctx, drivers.Command{Argv: argv, Dir: "/work"})
		if err != nil {
			panic(err)
		}
		fmt.Printf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Output:
	// exit 0: made test in /work
	// exit 0: made all the things in /work
	// exit 2: no src
}

// Capabilities are static: declared AND implemented AND not narrowed.
func Example_capabilities() {
	d := fake.New(&fake.Options{Undeclared: drivers.NewSet(drivers.CapTerminal)})
	fmt.Println(drivers.Effective(d, drivers.NewSet(drivers.CapRunnerIngress)))
	// Output:
	// exec,stream_exec,reuse,list,destroy_by_id,image_identity,template_capture,template_delete,files,reattach
}
