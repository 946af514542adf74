// Command envctl is an operator CLI over berth: it saves execution targets
// in a catalog, shows drivers and their capabilities, and runs the main job
// end to end (`envctl demo`).
//
// Usage:
//
//	envctl [--db PATH] [--json] [--verbose] [--as ROLE[:ID][@COMPANY,...]] [--test-mode] COMMAND [ARGS]
//
// Commands:
//
//	demo                                  run the main job on a temporary store
//	drivers                               list drivers and their capabilities
//	drivers show DRIVER                   a driver's config fields
//	env create --name N --driver D [--config FILE|-] [--description S] [--env K=V]... [--meta K=V]...
//	env list [--driver D] [--status S] [--company C]
//	env show ID|NAME [--company C]
//	env trust-host-key ID|NAME [--fingerprint SHA256:...] [--yes]
//	env update ID|NAME --revision N [--name N] [--description S] [--config FILE|-] [--env K=V]... [--meta K=V]...
//	env archive ID|NAME
//	env delete ID|NAME [--yes]
//	lease acquire ENV --company C [--run R] [--workspace W] [--policy P] [--require CAPS]
//	lease acquire --company C [--workspace W] [--project P] [--agent A] [...]  (through the scope's binding)
//	lease release LEASE [--disposition keep|stop|destroy] [--failed] [--reason S]
//	lease list [--env E] [--company C] [--status S]
//	lease sweep
//	assign set KIND [KEY] ENV --company C
//	assign show [--company C] [--env E] [--kind K]
//	assign clear KIND [KEY]
//	assign resolve --company C [--workspace W] [--project P] [--agent A] [--require CAPS]
//	image pin REF [--platform os/arch] [--insecure-registry HOST]...
//	image load FILE.tar [--name REPO] [--engine HOST]
//	image templates ENV | capture LEASE --name N | promote T | rollback T | revoke T [--delete] | history ENV | sweep
//	image setup ENV [--script FILE] [--interactive] [--name N] [--promote] [--rebuild]
//	image session show|cancel SESSION | session capture SESSION [--promote] | terminal SESSION
//	run ENV --company C [--workspace W] [--run R] [--runner-binary PATH] [--connect-timeout D] [--managed-account REF [--account-file PATH] [--project P]...] -- ARGV...
//	run --company C [--workspace W] [--project P] [--agent A] -- ARGV...  (through the scope's binding)
//	run ENV|--company C ... --workspace W --hold -- ARGV...  (keep the lease: reuse_by_workspace)
//	run --lease LEASE -- ARGV...  (in a held lease, kept held)
//	run ENV --company C [--workspace W] --workspace-dir DIR|--workspace-git REPO[@REF] [--collect DEST] -- ARGV...  (the task runs in the workspace)
//	workspace ls|get|put LEASE [PATH] [--to DIR|--from DIR] [--workspace ID|--workdir]
//	workspace show LEASE
//	probe ENV --company C [--runner [--runner-binary PATH]]
//	probe --draft --driver D --config FILE|-
//	qualification show ENV --company C
//	auth-check record ENV --company C (--account REF|--account-file FILE) [--project P]... --status succeeded|failed [--message S]
//	auth-check show [--company C] [--account REF]
//	auth-check clear --company C --account REF
//	bench [--only ssh,docker,runner-task,runner-stream,pins,lease,lease-postgres,replicas,files-docker,files-ssh] [--quick] [--json]
//	settings show | settings set [--enable-environments=BOOL] [--managed-sandbox-only=BOOL] [--quota-per-company N] [--quota-per-company-env N] [--revision N]
//
// envctl ends after each command. A lease acquired by `lease acquire`
// outlives the process as a record: a host driver's session (local, ssh)
// ends when envctl exits, and a later `lease release` leaves it
// pending_cleanup naming its holder while the holder's claim lasts, then
// ends it only by a check on the host; a sandbox driver's sandbox (docker, daytona) keeps running
// until `lease release` or a sweep after its expiry. The fake
// driver's sandboxes live in the envctl process and vanish with it.
//
// The database defaults to $XDG_DATA_HOME/berth/envctl.db (or
// ~/.local/share/berth/envctl.db). Secrets pasted into configs are moved
// into an encrypted file beside it (PATH.secrets, key in PATH.key); envctl
// processes sharing a database take turns on them through an OS file lock
// on PATH.lock.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/runnerbin"
)

// globals are the flags every command takes.
type globals struct {
	db       string
	json     bool
	verbose  bool
	as       authz.Principal
	testMode bool
	// claimGrace, if > 0, is berth.Options.Leases.ClaimGrace (lease acquire and
	// sweep --claim-grace).
	claimGrace time.Duration
	stdout     io.Writer
	stderr     io.Writer
	stdin      io.Reader
	// drivers, when not nil, replaces registeredDrivers() (tests share one
	// fake driver across commands with it).
	drivers []drivers.Driver
	// leaseRetention is berth.Options.Leases.PruneAfter (lease sweep
	// --retention); 0 for the default.
	leaseRetention time.Duration
	// runnerBinary is berth.Options.RunnerBinary (run --runner-binary,
	// probe --runner-binary).
	runnerBinary string
	// connectTimeout bounds run's wait for its runner to install, start
	// and connect (run --connect-timeout).
	connectTimeout time.Duration
	// runnerBuild, when not nil, configures run's build of the runner
	// from source when no binary is named (tests: an empty cache, no go
	// command).
	runnerBuild *runnerbin.Options
	// runnerSet, when not nil, is berth.Options.RunnerSet (probe --runner
	// without a binary: the runner is built from source for the target).
	runnerSet *drivers.RunnerSet
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	g := &globals{stdout: os.Stdout, stderr: os.Stderr, stdin: os.Stdin}
	err := runWith(ctx, g, os.Args[1:])
	stop()
	if err != nil {
		var es *exitStatus
		if !errors.Is(err, errUsage) && !errors.As(err, &es) {
			fmt.Fprint(os.Stderr, errorText(err, g.json, g.verbose))
		}
		os.Exit(exitCode(err))
	}
}

var errUsage = errors.New("usage")

// errorText is what envctl prints for a failed command. By default one
// line: the sentence for a person (errcode.MessageOf, which carries the
// fix) with the code and the reason, "envctl: MESSAGE (code not_found)";
// with verbose a second line with the detail, the technical chain; with
// asJSON the API's error shape as one JSON object. An error berth did not
// classify (envctl's own: a flag, a file) prints its text, the only
// thing it has.
func errorText(err error, asJSON, verbose bool) string {
	c := errcode.Code(err)
	if asJSON {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{
			"code": c.String(), "reason": errcode.ReasonOf(err), "message": errcode.MessageOf(err),
			"detail": err.Error(), "field": errcode.FieldOf(err), "target": errcode.TargetOf(err),
		}})
		return string(b) + "\n"
	}
	if c == errcode.Unknown {
		return "envctl: " + err.Error() + "\n"
	}
	line := fmt.Sprintf("envctl: %s (code %s", errcode.MessageOf(err), c)
	if r := errcode.ReasonOf(err); r != "" {
		line += ", reason " + r
	}
	line += ")\n"
	if verbose {
		line += "detail: " + err.Error() + "\n"
	}
	return line
}

// errorLine is errorText's default line, without its newline.
func errorLine(err error) string {
	return strings.TrimSuffix(errorText(err, false, false), "\n")
}

func exitCode(err error) int {
	var es *exitStatus
	switch {
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &es):
		return es.code
	}
	return 1
}

const usage = `usage: envctl [--db PATH] [--json] [--verbose] [--as ROLE[:ID][@COMPANY,...]] [--test-mode] COMMAND [ARGS]

commands:
  demo                       run the main job end to end on a temporary store
  drivers                    list drivers and their capabilities
  drivers show DRIVER        a driver's config fields: types, required or
                             default, and what each does
  env create|list|show|update|archive|delete
                             manage saved environments (see 'envctl env -h')
  lease acquire|release|list|sweep
                             lease environments for runs (see 'envctl lease -h')
  assign set|show|clear|resolve
                             bind environments to workspaces, projects, agents
                             and the instance default (see 'envctl assign -h')
  image pin REF [--platform os/arch] [--insecure-registry HOST]
                             pin an image tag to repo@sha256:...
  image load FILE.tar        put an image saved with 'docker save' into a
                             Docker engine that reaches no registry
  image templates|capture|promote|rollback|revoke|history|sweep
                             custom images: capture a lease, promote it for
                             the environment's leases (see 'envctl image -h')
  run ENV --company C [--workspace W] [--managed-account REF] -- ARGV...
                             run ARGV in a leased sandbox through berth's
                             runner, streaming its output; --managed-account
                             hands it a managed account (see 'envctl run -h')
                             --hold keeps the lease for the next turn, and
                             run --lease LEASE runs in a held one;
                             --workspace-dir DIR (--workspace-git REPO[@REF])
                             prepares a workspace the task runs in, --collect
                             DEST brings its changes back
  workspace ls|get|put|show LEASE [PATH]
                             list, download or upload the files of a live
                             lease or its workspace, show its workspaces
                             (see 'envctl workspace -h')
  probe ENV --company C      probe a saved environment (progress on stderr)
  probe --draft --driver D --config FILE
                             probe an unsaved config; saves no environment
  qualification show ENV --company C
                             show an environment's platform qualification
  auth-check record|show|clear
                             project auth checks of managed accounts (AUTH-2;
                             see 'envctl auth-check -h')
  bench [--only W,...] [--quick]
                             run berth's workloads against their anchors and
                             print the ratios (see 'envctl bench -h')
  settings show|set [--enable-environments=BOOL] [--managed-sandbox-only=BOOL]
                    [--quota-per-company N] [--quota-per-company-env N]
                             the instance settings (CFG-9; see 'envctl settings -h')

envctl ends after each command: a lease outlives it as a record. A host
driver's session (local, ssh) ends when envctl exits; a sandbox (docker,
daytona) keeps running until 'lease release' or a sweep after its expiry.
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return runWith(ctx, &globals{stdout: stdout, stderr: stderr, stdin: stdin}, args)
}

// runWith runs one command with g's streams (and g.drivers, if set).
func runWith(ctx context.Context, g *globals, args []string) error {
	stderr := g.stderr
	fs := flag.NewFlagSet("envctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	fs.StringVar(&g.db, "db", defaultDB(), "SQLite database file")
	fs.BoolVar(&g.json, "json", false, "print JSON (a failed command prints its error as JSON too)")
	fs.BoolVar(&g.verbose, "verbose", false, "print a failed command's detail (the technical chain) after its message")
	as := fs.String("as", "local_operator:envctl", "act as ROLE[:ID][@COMPANY,...] (roles: instance_admin, local_operator, board_member, agent; @ lists company grants)")
	fs.BoolVar(&g.testMode, "test-mode", false, "allow test-only drivers (fake) as saved targets")
	pluginDir := fs.String("plugins", "", "load the driver plugins that DIR's pins file lists (drivers/plugin; a plugin replaces the compiled driver of its name)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if *pluginDir != "" {
		if err := loadPlugins(g, *pluginDir); err != nil {
			return err
		}
	}
	g.as = parsePrincipal(*as)
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "demo":
		return runDemo(ctx, g, rest)
	case "drivers":
		return runDrivers(ctx, g, rest)
	case "env":
		return runEnv(ctx, g, rest)
	case "lease":
		return runLease(ctx, g, rest)
	case "assign":
		return runAssign(ctx, g, rest)
	case "image":
		return runImage(ctx, g, rest)
	case "probe":
		return runProbe(ctx, g, rest)
	case "run":
		return runRun(ctx, g, rest)
	case "qualification":
		return runQualification(ctx, g, rest)
	case "auth-check":
		return runAuthCheck(ctx, g, rest)
	case "bench":
		return runBench(ctx, g, rest)
	case "settings":
		return runSettings(ctx, g, rest)
	case "workspace":
		return runWorkspace(ctx, g, rest)
	case "help", "-h", "--help":
		fs.Usage()
		return nil
	}
	fmt.Fprintf(stderr, "envctl: unknown command %q\n", cmd)
	fs.Usage()
	return errUsage
}

// parsePrincipal reads ROLE[:ID][@COMPANY,...]: a role, an optional id and
// the companies the principal holds grants for.
func parsePrincipal(s string) authz.Principal {
	who, grants, _ := strings.Cut(s, "@")
	role, id, _ := strings.Cut(who, ":")
	p := authz.Principal{ID: id, Role: authz.Role(role)}
	for _, c := range strings.Split(grants, ",") {
		if c = strings.TrimSpace(c); c != "" {
			p.Companies = append(p.Companies, c)
		}
	}
	return p
}

func defaultDB() string {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "envctl.db"
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "berth", "envctl.db")
}

// parseInterleaved parses fs from args in which flags and positional
// arguments may be mixed ("show ID --json" as well as "show --json ID").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // let fs.Parse report it
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return pos, nil
}

// kvList is a repeatable K=V flag.
type kvList map[string]string

func (l *kvList) String() string { return "" }

func (l *kvList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	if *l == nil {
		*l = kvList{}
	}
	(*l)[k] = v
	return nil
}
