// Package plugin serves a driver from its own process and loads it into a
// host: a provider plugin. A plugin is a binary that serves one driver
// over gRPC behind HashiCorp go-plugin's handshake; the host starts it
// when it first needs the driver's code and talks to it through the
// protocol of internal/pluginpb/driver.proto, the contract a plugin in
// another language implements. A plugin's main is one line:
//
//	func main() { plugin.Serve(acme.New(), "1.2.0") }
//
// A host loads it by its path and the operator's pin, and passes the
// driver in Options.Drivers like a compiled one:
//
//	d, err := plugin.Load(plugin.Plugin{Binary: "/opt/berth/plugins/acme", SHA256: pin}, nil)
//
// or every plugin of a directory whose pins file (PinsFile, in the form
// sha256sum prints) the operator wrote: plugin.LoadDir("/opt/berth/plugins", opts).
//
// Load reads the manifest beside the binary (Binary + ".manifest.json",
// written once by WriteManifest): the driver's name, the plugin's version,
// the protocol version, the capabilities, the config schema, the startup
// budget and isolation, and the SHA-256 of the binary it describes.
// Listings are served from it, so listing a plugin driver starts nothing
// (the driver is a drivers.PluginReporter: listings show its binary,
// version and pin);
// validating a config whose schema checks in code, acquiring, listing
// sandboxes and the rest start the plugin (once; again after it exited),
// and its handshake must agree with the manifest field by field, else the
// plugin is refused naming the first difference and listed as unavailable
// with that reason.
//
// The driver Load returns cannot be told from a compiled one: it
// implements the optional interface of each capability the plugin
// declares and no other, and a driver's error crosses the boundary as
// its code, reason, message and detail, with the contract's sentinels it
// wrapped, so that errors.Is, errcode.Code, errcode.ReasonOf and
// transience answer as for a compiled driver. A plugin that crashed or
// hung up makes calls fail with code unavailable naming the plugin.
//
// A plugin is trusted code, as a compiled driver is: it runs as the
// host's user, with the host's environment, and receives configs with
// their secrets resolved at use, as a compiled driver does. The pin
// protects against running another binary than the one the operator
// chose (a replaced or tampered file, a plugin directory another account
// can write): a binary whose SHA-256 does not match is never started, and
// a manifest written for another binary is refused. It does not make an
// untrusted plugin safe to run.
//
// Protocol version 1 carries the description, config validation, image
// reference and narrowing, isolation, provider health, acquire (with its
// allocated callback), resume, bounded exec (stdin read whole first, at
// most 255 MiB), streaming exec with stdin and signals, release with its
// receipt, list by labels, destroy by id, image identity, capture,
// template delete, the terminal (with resize), files (tar streams both
// ways, a directory's listing), the runners' architecture
// (drivers.ArchReporter, when the plugin's driver implements it), the
// provider's images for an operator's picker (drivers.ImageLister, when
// it implements that: the manifest and the handshake say images, an
// addition within version 1 that a plugin or host built before it
// neither says nor reads) and the runner ingress. The ingress is the
// plugin's driver's own (a unix socket bind-mounted into a container,
// say), opened in the plugin's process;
// each connection a runner makes to it is carried, bytes both ways, over
// one stream of a gRPC service the host serves on go-plugin's broker for
// that ingress, and is a net.Conn that the host's ingress Accept returns:
// the plugin knows nothing of the controller's protocol. A plugin
// declares what its driver declares and implements of these and nothing
// else, so the conformance suite (drivers/drivertest) holds through the
// boundary.
//
// A streaming exec's output does not cross the plugin's process when
// its driver has it on a connection of this machine (the Docker driver's
// attach socket, not TLS): the plugin hands the connection to the host,
// a duplicate of its descriptor sent on a unix socket pair that the host
// made when it started the process (the process inherits its end; only
// the host's process holds the other), and the host reads and
// demultiplexes it as the compiled driver would. The stream's control
// stays on gRPC, and its guarantees with it: the host says when it
// delivered the last byte and the plugin sends the exit after that, so
// every byte is written before Wait returns; a cancelled stream or a
// plugin that dies closes the host's duplicate before Wait returns. Any
// other output comes in the stream's messages.
//
// A plugin that crashed or was killed is started again at the next call,
// after a backoff that doubles for each crash in a row (100 ms to 30 s;
// a call in the backoff fails as unavailable, saying when). A sandbox of
// the dead process is resumed through the new one at its next call (a
// driver that declares reuse), or destroyed by id at its release (one
// that declares destroy_by_id); List and Destroy by id sweep what a
// killed acquisition left. A runner ingress ends with its sandbox's
// release. One open when its process dies is opened again through the
// new process, where the runner in the sandbox finds it: the sandbox is
// resumed there and its driver opens the ingress at the same endpoint,
// and Accept goes on returning the runner's connections meanwhile (a
// controller serving it sees a pause, as on a reconnect). Where that
// cannot be done (a driver that does not resume, a sandbox gone, a
// refused handshake, an endpoint that moved, a plugin the host closed)
// Accept fails as unavailable, saying why. A plugin's stderr goes to
// Options.Logger, a line at most 1 KiB and 1000 lines per process.
package plugin
