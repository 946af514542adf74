// Package prpkeys carries the signing keys of a prp.Signer to
// internal/prpwire, which mints and verifies the runners' connection
// tokens and derives their state keys with them. prp.Signer keeps its keys
// in an unexported field, so that a host that builds one (prp.NewSigner)
// can pass it to berth.New and never read the keys back; berth's own wire
// code reaches them through Of. It imports no berth package, so that prp
// can import it.
package prpkeys

// Keys are a Signer's keys: the one named Current signs, every one in ByID
// verifies (so keys can rotate). They never change after the Signer is made.
type Keys struct {
	Current string
	ByID    map[string][]byte
}

// Of returns the keys of signer, a *prp.Signer (nil for a nil Signer).
// Package prp sets it when it is initialized, which is before any package
// that imports prp runs.
var Of func(signer any) *Keys
