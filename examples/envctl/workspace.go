package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"text/tabwriter"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/tarsafe"
)

const workspaceUsage = `usage: envctl workspace COMMAND LEASE [PATH] [FLAGS]

  ls LEASE [PATH]                 list the directory PATH of the lease
  get LEASE [PATH] [--to DIR]     download PATH into DIR (default .)
  put LEASE [PATH] [--from DIR] [--exclude PATTERN]... [--no-default-excludes]
                                  upload DIR (default .) under PATH
  show LEASE                      the lease's workspaces: source, checkpoint,
                                  owner, state, and what changed since the
                                  checkpoint (or the receipt of an ended one)

ls, get and put act inside a workspace (package workspace): the one named
by --workspace ID, else the lease's one live workspace when it has exactly
one ('envctl run --workspace-dir' or --workspace-git prepared it), else,
or with --workdir, the lease's working directory. PATH is relative to that
directory (default: the directory itself); an absolute path, or one that
leaves it, is refused. The
files go through the driver's files capability (the Docker archive API or
tar through the sandbox, tar over SSH, Daytona's toolbox, the fake's
memory) of a live lease: a held one ('envctl run --hold'), a sandbox
lease acquired by 'envctl lease acquire', or any lease of a sandbox driver
(docker, daytona) by its id; a host lease (local, ssh) only in the process
that holds its session.

berth authorizes each as --as does the lease: its company's agents and
the operators read and write, a board member of its company lists only
(a file can hold what a task was handed), a principal of another company
does not find the lease. Inside a workspace, get, put and show's changes
open the lease as its holder does ('envctl run --lease'), so they reach a
held lease of a sandbox driver (docker, daytona) or an ssh lease whose
holder is gone, never a local one from another process; show then prints
the records alone.

get unpacks what the sandbox sends with berth's safe extractor
(tarsafe.Extract): nothing is written outside DIR (no "..", no absolute
name, no link that leads out of DIR, no device or fifo, no setuid bit),
at most 1 GiB and 100,000 entries. A directory's contents land in DIR,
a file under its base name. put packs DIR with tarsafe.Create: symbolic
links go in as links (never their targets), and .env, .env.*, *.pem,
id_* and .git/config are left out unless --no-default-excludes; each
--exclude PATTERN (path.Match on the slash-separated path relative to
DIR; without a slash, on a base name anywhere) leaves out more.
`

func runWorkspace(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" {
		fmt.Fprint(g.stderr, workspaceUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	fset := flag.NewFlagSet("workspace "+sub, flag.ContinueOnError)
	fset.SetOutput(g.stderr)
	fset.BoolVar(&g.json, "json", g.json, "print JSON")
	to := "."
	from := "."
	var excludes projectList
	noDefaults := false
	wsID, workdir := "", false
	if sub == "ls" || sub == "get" || sub == "put" {
		fset.StringVar(&wsID, "workspace", "", "act inside this workspace (default: the lease's one live workspace)")
		fset.BoolVar(&workdir, "workdir", false, "act in the lease's working directory, not in its workspace")
	}
	switch sub {
	case "show":
		pos, err := parseInterleaved(fset, args)
		if err != nil || len(pos) != 1 {
			fmt.Fprint(g.stderr, workspaceUsage)
			return errUsage
		}
		return workspaceShow(ctx, g, pos[0])
	case "ls":
	case "get":
		fset.StringVar(&to, "to", ".", "directory on this host to unpack into")
	case "put":
		fset.StringVar(&from, "from", ".", "directory on this host to upload")
		fset.Var(&excludes, "exclude", "leave out what matches PATTERN (repeatable)")
		fset.BoolVar(&noDefaults, "no-default-excludes", false, "do not leave out .env, .env.*, *.pem, id_*, .git/config")
	default:
		fmt.Fprint(g.stderr, workspaceUsage)
		return errUsage
	}
	pos, err := parseInterleaved(fset, args)
	if err != nil || len(pos) < 1 || len(pos) > 2 {
		fmt.Fprint(g.stderr, workspaceUsage)
		return errUsage
	}
	id, dir := pos[0], "."
	if len(pos) == 2 {
		dir = pos[1]
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	if wsID != "" && workdir {
		return fmt.Errorf("workspace %s %s: flags --workspace and --workdir: name one", sub, id)
	}
	files, where, err := workspaceFiles(ctx, g, sys, sub, id, wsID, workdir)
	if err != nil {
		return fmt.Errorf("workspace %s %s: %w", sub, id, err)
	}
	switch sub {
	case "ls":
		list, err := files.ReadDir(ctx, dir)
		if err != nil {
			return fmt.Errorf("workspace ls %s %s: %w", id, dir, err)
		}
		if g.json {
			if list == nil {
				list = []drivers.FileInfo{}
			}
			return writeJSON(g.stdout, list)
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MODE\tSIZE\tNAME")
		for _, fi := range list {
			name := fi.Name
			switch {
			case fi.Mode.IsDir():
				name += "/"
			case fi.Mode&fs.ModeSymlink != 0:
				name += " -> " + fi.LinkTarget
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", fi.Mode, fi.Size, name)
		}
		return tw.Flush()
	case "get":
		if err := os.MkdirAll(to, 0o755); err != nil {
			return fmt.Errorf("workspace get %s %s: %w", id, dir, err)
		}
		root, err := os.OpenRoot(to)
		if err != nil {
			return fmt.Errorf("workspace get %s %s: %w", id, dir, err)
		}
		defer root.Close()
		// The sandbox writes into a pipe, the safe extractor reads it: a
		// refused entry stops both.
		if err := extractFrom(root, func(w io.Writer) error { return files.GetArchive(ctx, dir, w) }); err != nil {
			return fmt.Errorf("workspace get %s %s into %s: %w", id, dir, to, err)
		}
		fmt.Fprintf(g.stderr, "envctl: %s of %s unpacked into %s\n", dir, where, to)
		return nil
	default: // put
		root, err := os.OpenRoot(from)
		if err != nil {
			return fmt.Errorf("workspace put %s %s: %w", id, dir, err)
		}
		defer root.Close()
		opts := tarsafe.Options{Exclude: append(tarsafe.DefaultExclude(), excludes...)}
		if noDefaults {
			opts.Exclude = append([]string{}, excludes...)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarsafe.Create(pw, root, opts)) }()
		err = files.PutArchive(ctx, dir, pr)
		pr.CloseWithError(err)
		if err != nil {
			return fmt.Errorf("workspace put %s %s from %s: %w", id, dir, from, err)
		}
		fmt.Fprintf(g.stderr, "envctl: %s uploaded under %s of %s\n", from, dir, where)
		return nil
	}
}
