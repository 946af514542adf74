// Package execrelay is a runner ingress (drivers.RunnerIngress) carried
// over one streaming exec's standard input and output, for a driver whose
// sandboxes have no network path to the host (a pod on a remote cluster,
// reached only through the API server's exec). In the sandbox, a relay
// (berth-runner relay --socket PATH: Serve) listens on a unix socket and
// carries each connection made to it as one stream of a yamux session over
// its stdin and stdout; on the host, a Listener (Listen) runs that relay
// through the driver's exec and yields each relayed connection from
// Accept, and starts the relay again, with backoff, when its exec ends.
//
// A driver with a streaming exec and a POSIX shell in its sandboxes gets
// a whole drivers.RunnerIngress from OpenIngress (its HostRunner installs
// the runner binary, then):
//
//	in, err := execrelay.OpenIngress(ctx, sb, execrelay.IngressConfig{
//		Binary:   "/opt/berth/berth-runner", // installed by the driver
//		Socket:   "/run/berth/prp.sock",     // Endpoint: "unix:/run/berth/prp.sock"
//		StateDir: "/var/lib/berth-runner",
//	})
//	// in.Launch starts the runner; the host serves the controller on in.
//
// Another gets the listener alone, with a StartFunc of its own or
// StreamExec:
//
//	start := execrelay.StreamExec(se, drivers.Command{
//		Argv: execrelay.Command("/opt/berth/berth-runner", "/run/berth/prp.sock"),
//	})
//	ln := execrelay.Listen(ctx, start, nil)
//	defer ln.Close()
//	if err := ln.Ready(ctx); err != nil { ... } // the socket is bound
//	go http.Serve(ln, controller)               // the runner dials "unix:/run/berth/prp.sock"
//
// Where to start: listen.go (the host: Listen, Options, Listener), relay.go
// (the sandbox: Serve), guard.go (the checks of the relay's frames),
// exec.go (Command, StreamExec), ingress.go (OpenIngress).
//
// The sandbox is hostile. Anyone in it may connect to the socket, which is
// the same as dialing the controller (it authenticates runners by their
// tickets). Nothing in it can speak as the host: the host's frames reach
// the relay on its standard input only, and the runner binary makes the
// relay non-dumpable, so that a task of its account can neither open its
// /proc fds nor ptrace it. What the relay sends is checked before yamux
// reads it and bounded (Options.MaxConns, a 256 KiB window per stream,
// pings); a protocol error ends that relay, which the listener starts
// again. Nothing secret is in the relay's argv or environment.
//
// A limit: the socket lives in the sandbox's own filesystem, in a
// directory of the relay's account. A task of that same account can
// replace the socket with one of its own (as it can any file of its
// account), and so stand between a runner that reconnects and the host;
// a driver whose tasks must not is one whose relay runs as another account
// than the tasks (or whose socket directory the tasks cannot write, as
// Docker's read-only mount).
package execrelay
