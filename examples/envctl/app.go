package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/kubernetes"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/sqlite"
)

// registeredDrivers are the drivers envctl offers: the local host, SSH
// hosts, Docker engines, Daytona, Kubernetes clusters, and the fake (saved
// only in --test-mode).
// Constructing them does no I/O: the Docker driver contacts its engine at
// acquire (an unreachable engine fails the acquisition or probe with
// drivers.ErrUnavailable), Daytona its API, SSH its server.
func registeredDrivers() []drivers.Driver {
	return []drivers.Driver{local.New(nil), ssh.New(nil), docker.New(nil), daytona.New(nil), kubernetes.New(nil), fake.New(nil)}
}

// driverList returns g.drivers, or registeredDrivers() when unset.
func (g *globals) driverList() []drivers.Driver {
	if g.drivers != nil {
		return g.drivers
	}
	return registeredDrivers()
}

// loadPlugins loads the plugins of dir (-plugins) into g's drivers: a
// plugin replaces the compiled driver of its name. Their stderr goes to
// envctl's stderr, one line a record.
func loadPlugins(g *globals, dir string) error {
	ds, err := plugin.LoadDir(dir, &plugin.Options{Logger: slog.New(slog.NewTextHandler(g.stderr, nil))})
	if err != nil {
		return fmt.Errorf("envctl: -plugins: %w", err)
	}
	byName := map[string]bool{}
	for _, d := range ds {
		byName[d.Name()] = true
	}
	list := ds
	for _, d := range g.driverList() {
		if !byName[d.Name()] {
			list = append(list, d)
		}
	}
	g.drivers = list
	return nil
}

// system is a berth.System over the --db file's stores; Close closes the
// System, then the database.
type system struct {
	*berth.System
	stores store.Stores
	db     *sqlite.DB
}

// settings returns a Reader of the stores' instance settings, as the
// System's availability gate reads them: the stored settings, or the
// defaults while none were written.
func (s *system) settings() instance.Reader { return settingsReader{s.stores.Settings} }

// settingsReader is an instance.Reader over the settings store.
type settingsReader struct{ st instance.Store }

func (r settingsReader) Current(ctx context.Context) (instance.Settings, error) {
	s, err := r.st.GetSettings(ctx)
	if errors.Is(err, errcode.ErrNotFound) {
		return instance.Defaults(), nil
	}
	return s, err
}

// Close closes the System and then its database.
func (s *system) Close() error {
	return errors.Join(s.System.Close(), s.db.Close())
}

// openSystem opens the catalog in the --db file.
func openSystem(ctx context.Context, g *globals) (*system, error) {
	path, err := filepath.Abs(g.db)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("envctl: database directory: %w", err)
	}
	secrets, err := secretfile.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	key, err := runnerKey(path)
	if err != nil {
		db.Close()
		return nil, err
	}
	sys, err := berth.New(ctx, &berth.Options{
		Stores:   db.Stores(),
		Drivers:  g.driverList(),
		Secrets:  secrets,
		TestMode: g.testMode,
		// envctl exits after one command: it starts no background pool
		// refill (one would be cut off at exit); a running host's next
		// sweep or pool maintenance fills the pools.
		Leases:       &lease.Options{ClaimGrace: g.claimGrace, PruneAfter: g.leaseRetention, ManualPoolRefill: true},
		RunnerBinary: g.runnerBinary,
		RunnerSet:    g.runnerSet,
		// The runners of held leases (run --hold) outlive the command:
		// the next envctl process of the database verifies their tokens
		// with the same key and keeps their output where the runners'
		// store indexes it.
		RunnerKeys: [][]byte{key},
		RunnerDir:  path + ".runners",
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &system{System: sys, stores: db.Stores(), db: db}, nil
}

// runnerKey returns the runners' token key of the database at path, kept
// at PATH.runner-key (32 random bytes, mode 0600), made by the first
// process that needs it: the processes of one database verify each
// other's runner tokens, as replicas sharing Stores.Runners do.
func runnerKey(path string) ([]byte, error) {
	file := path + ".runner-key"
	key, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("envctl: runner key: %w", err)
		}
		f, ferr := os.OpenFile(file+".tmp-"+hex.EncodeToString(key[:4]), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if ferr != nil {
			return nil, fmt.Errorf("envctl: runner key: %w", ferr)
		}
		_, werr := f.Write(key)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			os.Remove(f.Name())
			return nil, fmt.Errorf("envctl: runner key: %w", err)
		}
		// The first link wins; a process that lost the race reads it.
		lerr := os.Link(f.Name(), file)
		os.Remove(f.Name())
		if lerr != nil && !errors.Is(lerr, os.ErrExist) {
			return nil, fmt.Errorf("envctl: runner key: %w", lerr)
		}
		key, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("envctl: runner key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("envctl: runner key %s holds %d bytes, want 32: remove it (no held lease's runner can reconnect then)", file, len(key))
	}
	return key, nil
}

// runDrivers lists drivers, whether each can be used (test mode
// included), their capabilities and the provider health last measured. It
// reads the store and calls no provider.
func runDrivers(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 && args[0] == "show" {
		return runDriversShow(g, args[1:])
	}
	if len(args) > 0 {
		fmt.Fprintf(g.stderr, "envctl drivers: unknown argument %q; usage: envctl drivers [show DRIVER]\n", args[0])
		return errUsage
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	health, err := sys.stores.Health.ListProviderHealth(ctx)
	if err != nil {
		return err
	}
	rows, err := driverRows(ctx, sys.Catalog(), g.as, sys.settings(), health)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, rows)
	}
	return printDrivers(g.stdout, rows)
}

// runDriversShow prints the config fields of one driver (envctl drivers
// show DRIVER): what an operator can put in an environment's config, basic
// fields first, then the advanced ones. It opens no store and contacts no
// provider.
func runDriversShow(g *globals, args []string) error {
	if len(args) != 1 {
		fmt.Fprintln(g.stderr, "usage: envctl drivers show DRIVER")
		return errUsage
	}
	var names []string
	for _, d := range g.driverList() {
		if d.Name() != args[0] {
			names = append(names, d.Name())
			continue
		}
		schema := d.Schema()
		if g.json {
			return writeJSON(g.stdout, struct {
				Driver string         `json:"driver"`
				Fields []config.Field `json:"fields"`
			}{d.Name(), schema.Fields})
		}
		return printSchema(g.stdout, d.Name(), schema)
	}
	fmt.Fprintf(g.stderr, "envctl drivers show: there is no driver %q; the drivers are %s\n", args[0], strings.Join(names, ", "))
	return errUsage
}

// printSchema writes a driver's config fields for a person: each field's
// name, type, whether it is required and its default, then its help
// wrapped under it; the advanced fields under their own heading.
func printSchema(w io.Writer, driver string, s *config.Schema) error {
	var basic, advanced []config.Field
	for _, f := range s.Fields {
		if f.Advanced && !f.Required {
			advanced = append(advanced, f)
		} else {
			basic = append(basic, f)
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s: %d config fields (envctl env create --driver %s --config FILE takes them as JSON)\n", driver, len(s.Fields), driver)
	field := func(f config.Field) {
		var attrs []string
		typ := f.Type.String()
		if len(f.Enum) > 0 {
			typ = "one of " + strings.Join(f.Enum, ", ")
		}
		attrs = append(attrs, typ)
		switch {
		case f.Required:
			attrs = append(attrs, "required")
		case f.Default != nil:
			attrs = append(attrs, fmt.Sprintf("default %v", f.Default))
		default:
			attrs = append(attrs, "optional")
		}
		switch f.Kind {
		case config.KindSecret:
			attrs = append(attrs, "secret: the value is moved to the secret store and never shown again")
		case config.KindSecretMap:
			attrs = append(attrs, "secret values: each is moved to the secret store; the keys stay visible")
		}
		fmt.Fprintf(bw, "\n  %s (%s)\n", f.Name, strings.Join(attrs, "; "))
		for _, line := range wrapWords(f.Doc, 72) {
			fmt.Fprintf(bw, "      %s\n", line)
		}
	}
	for _, f := range basic {
		field(f)
	}
	if len(advanced) > 0 {
		fmt.Fprintf(bw, "\nAdvanced (seldom changed):\n")
		for _, f := range advanced {
			field(f)
		}
	}
	return bw.Flush()
}

// wrapWords breaks text into lines of at most width columns at spaces (a
// longer word stands alone on its line).
func wrapWords(text string, width int) []string {
	var lines []string
	var line strings.Builder
	for _, word := range strings.Fields(text) {
		if line.Len() > 0 && line.Len()+1+len(word) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	if line.Len() > 0 {
		lines = append(lines, line.String())
	}
	return lines
}
